//! Rules persisted in the user's config file: what `allow_always` and `deny_always` answers
//! and `toold rules remove` write, as `[[permissions.project]]` tables.
//!
//! The file is edited in place (its comments, order and layout kept), checked whole as the
//! daemon would read it before anything is written (an edit never leaves a config the daemon
//! refuses), and replaced atomically: a temporary file beside it, synced, renamed over it. A
//! missing file is created `0600` (it may come to hold MCP servers' secrets), its directory
//! `0700`.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, Value};

pub use crate::permission::RuleList;

/// Adds `rule` to `list` of `project`'s `[[permissions.project]]` table in `file` (the table is
/// made when the project has none; a rule already there is not added twice). Returns whether
/// the file changed.
pub fn add_project_rule(
    file: &Path,
    project: &Path,
    list: RuleList,
    rule: &str,
) -> Result<bool, String> {
    let mut document = read(file)?;
    let tables = project_tables(&mut document)?;
    let project_text = project.display().to_string();
    let found = tables.iter().position(|table| names(table, &project_text));
    let index = match found {
        Some(index) => index,
        None => {
            let mut table = Table::new();
            table.insert("path", toml_edit::value(project_text.clone()));
            tables.push(table);
            tables.len() - 1
        }
    };
    let table = tables.get_mut(index).expect("the table just found or made");
    let rules = table
        .entry(list.key())
        .or_insert_with(|| Item::Value(Value::Array(Array::new())))
        .as_array_mut()
        .ok_or_else(|| {
            format!(
                "{} of the project {project_text} is not an array",
                list.key()
            )
        })?;
    if rules.iter().any(|value| value.as_str() == Some(rule)) {
        return Ok(false);
    }
    rules.push(rule);
    save(file, &document)?;
    Ok(true)
}

/// Removes `rule` from every list where `file` has it: the `[[permissions.project]]` tables of
/// `project` (every table when `None`) and, when `project` is `None`, `[permissions]` itself.
/// Returns how many were removed (nothing is written when none was).
pub fn remove_rule(file: &Path, project: Option<&Path>, rule: &str) -> Result<usize, String> {
    if !file.exists() {
        return Ok(0);
    }
    let mut document = read(file)?;
    let mut removed = 0;
    let project_text = project.map(|project| project.display().to_string());
    if project.is_none()
        && let Some(permissions) = document
            .get_mut("permissions")
            .and_then(Item::as_table_like_mut)
    {
        removed += remove_from_lists(permissions, rule);
    }
    if let Some(tables) = document
        .get_mut("permissions")
        .and_then(|permissions| permissions.get_mut("project"))
        .and_then(Item::as_array_of_tables_mut)
    {
        for table in tables.iter_mut() {
            if project_text
                .as_deref()
                .is_none_or(|path| names(table, path))
            {
                removed += remove_from_lists(table, rule);
            }
        }
    }
    if removed > 0 {
        save(file, &document)?;
    }
    Ok(removed)
}

fn remove_from_lists(table: &mut dyn toml_edit::TableLike, rule: &str) -> usize {
    let mut removed = 0;
    for list in ["allow", "ask", "deny"] {
        if let Some(rules) = table.get_mut(list).and_then(Item::as_array_mut) {
            let before = rules.len();
            rules.retain(|value| value.as_str() != Some(rule));
            removed += before - rules.len();
        }
    }
    removed
}

/// Whether a project table is `path`'s.
fn names(table: &Table, path: &str) -> bool {
    table.get("path").and_then(Item::as_str) == Some(path)
}

/// `[[permissions.project]]`, made when missing.
fn project_tables(document: &mut DocumentMut) -> Result<&mut ArrayOfTables, String> {
    let permissions = document
        .entry("permissions")
        .or_insert_with(|| {
            let mut table = Table::new();
            table.set_implicit(true);
            Item::Table(table)
        })
        .as_table_like_mut()
        .ok_or("[permissions] of the config is not a table")?;
    permissions
        .entry("project")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()))
        .as_array_of_tables_mut()
        .ok_or_else(|| "permissions.project of the config is not an array of tables".to_owned())
}

fn read(file: &Path) -> Result<DocumentMut, String> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(format!("cannot read {}: {error}", file.display())),
    };
    text.parse::<DocumentMut>()
        .map_err(|error| format!("{} is not valid TOML: {error}", file.display()))
}

/// Writes `document` over `file` atomically, after checking it as the daemon reads a config.
fn save(file: &Path, document: &DocumentMut) -> Result<(), String> {
    let text = document.to_string();
    super::Config::from_toml(&text, file).map_err(|error| {
        format!("the edited config would not be valid, nothing written: {error}")
    })?;
    let dir = file
        .parent()
        .ok_or_else(|| format!("{} has no directory", file.display()))?;
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|error| format!("cannot make {}: {error}", dir.display()))?;
    }
    let mode = std::fs::metadata(file).map_or(0o600, |meta| meta.permissions().mode() & 0o7777);
    let temporary = temporary_beside(file);
    let written = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        out.write_all(text.as_bytes())?;
        out.set_permissions(std::fs::Permissions::from_mode(mode))?;
        out.sync_all()?;
        std::fs::rename(&temporary, file)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        format!("cannot write {}: {error}", file.display())
    })
}

fn temporary_beside(file: &Path) -> PathBuf {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    file.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_goes_in_its_project_table_and_the_rest_of_the_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toold/config.toml");
        assert!(
            add_project_rule(
                &file,
                Path::new("/p"),
                RuleList::Allow,
                "run_command(git log *)"
            )
            .unwrap()
        );
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.insert_str(0, "# mine, kept\nmax_parallel = 4 # and this\n\n");
        std::fs::write(&file, &text).unwrap();
        assert!(
            add_project_rule(&file, Path::new("/p"), RuleList::Deny, "run_command(rm *)").unwrap()
        );
        assert!(
            !add_project_rule(&file, Path::new("/p"), RuleList::Deny, "run_command(rm *)").unwrap()
        );
        assert!(add_project_rule(&file, Path::new("/q"), RuleList::Ask, "write_file").unwrap());
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# mine, kept\nmax_parallel = 4 # and this\n"),
            "{text}"
        );
        let config = crate::config::Config::from_toml(&text, &file).unwrap();
        let projects = &config.rules.projects;
        assert_eq!(projects.len(), 2, "{text}");
        assert_eq!(projects[0].path, Path::new("/p"));
        assert_eq!(projects[0].rules.allow, ["run_command(git log *)"]);
        assert_eq!(projects[0].rules.deny, ["run_command(rm *)"]);
        assert_eq!(projects[1].rules.ask, ["write_file"]);

        assert_eq!(
            remove_rule(&file, Some(Path::new("/q")), "run_command(rm *)").unwrap(),
            0
        );
        assert_eq!(
            remove_rule(&file, Some(Path::new("/p")), "run_command(rm *)").unwrap(),
            1
        );
        let config =
            crate::config::Config::from_toml(&std::fs::read_to_string(&file).unwrap(), &file)
                .unwrap();
        assert!(config.rules.projects[0].rules.deny.is_empty());
    }

    #[test]
    fn an_edit_that_would_not_be_read_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "[permissions]\nallow = []\n").unwrap();
        let error =
            add_project_rule(&file, Path::new("/p"), RuleList::Allow, "run_command(x").unwrap_err();
        assert!(error.contains("nothing written"), "{error}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "[permissions]\nallow = []\n"
        );
        std::fs::write(&file, "permissions = 3\n").unwrap();
        assert!(add_project_rule(&file, Path::new("/p"), RuleList::Allow, "read_file").is_err());
    }
}
