//! Rules persisted in the user's config file: what `allow_always` and `deny_always` answers
//! and `toold rules remove` write, as `[[permissions.project]]` tables, and what `toold import
//! --write` merges in (rules, `[sandbox]`, `sandboxed_commands`), each with a comment saying
//! where it came from.
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

use super::import::Import;
pub(crate) use crate::permission::RuleList;

/// Adds `rule` to `list` of `project`'s `[[permissions.project]]` table in `file` (the table is
/// made when the project has none; a rule already there is not added twice). Returns whether
/// the file changed.
pub(crate) fn add_project_rule(
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

/// What merging an import into a config did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// Rules, directories and settings added.
    pub added: usize,
    /// Rules, directories and settings the config already held as imported.
    pub present: usize,
    /// Settings whose value the import replaced: `sandbox.mode: "off" → "read_only"`.
    pub replaced: Vec<String>,
}

/// Merges `import` into `file` (rules into `project`'s `[[permissions.project]]` table when
/// given, else `[permissions]`), keeping what the file holds; nothing is written when nothing
/// changes.
pub fn write_import(
    file: &Path,
    project: Option<&Path>,
    import: &Import,
) -> Result<Merged, String> {
    let mut document = read(file)?;
    let merged = merge_import(&mut document, project, import)?;
    if merged.added > 0 || !merged.replaced.is_empty() {
        save(file, &document)?;
    }
    Ok(merged)
}

/// `import` as a config of its own, checked as the daemon would read it.
pub fn render_import(project: Option<&Path>, import: &Import) -> Result<String, String> {
    let mut document = DocumentMut::new();
    merge_import(&mut document, project, import)?;
    let text = document.to_string();
    super::Config::from_toml(&text, Path::new("(the imported config)"))
        .map_err(|error| format!("the imported config would not be valid: {error}"))?;
    Ok(text)
}

/// Merges `import` into `document`: a rule or directory already there is not added twice, a
/// setting already there is replaced (and said so); comments and order are kept.
pub(crate) fn merge_import(
    document: &mut DocumentMut,
    project: Option<&Path>,
    import: &Import,
) -> Result<Merged, String> {
    let mut merged = Merged::default();
    if !import.rules.is_empty() {
        let table = rules_table(document, project)?;
        // New lists in the order the config documents them.
        for list in [RuleList::Allow, RuleList::Ask, RuleList::Deny] {
            if import.rules.iter().any(|rule| rule.list == list) {
                table
                    .entry(list.key())
                    .or_insert_with(|| Item::Value(Value::Array(Array::new())));
            }
        }
        // One comment per run of rules from the same place, in each list.
        let mut last_origin: [Option<&str>; 3] = [None; 3];
        for rule in &import.rules {
            let slot = match rule.list {
                RuleList::Allow => 0,
                RuleList::Ask => 1,
                RuleList::Deny => 2,
            };
            let key = rule.list.key();
            let rules = table
                .entry(key)
                .or_insert_with(|| Item::Value(Value::Array(Array::new())))
                .as_array_mut()
                .ok_or_else(|| format!("permissions {key} of the config is not an array"))?;
            if rules.iter().any(|value| value.as_str() == Some(&rule.rule)) {
                merged.present += 1;
                continue;
            }
            let comment = (last_origin[slot] != Some(&rule.origin)).then_some(&*rule.origin);
            last_origin[slot] = Some(&rule.origin);
            push_commented(rules, &rule.rule, comment);
            merged.added += 1;
        }
    }
    if let Some(setting) = &import.sandboxed_commands {
        let permissions = explicit_table(document, "permissions")?;
        set_commented(
            permissions,
            "permissions.sandboxed_commands",
            Value::from(setting.value),
            &setting.origin,
            &mut merged,
        );
    }
    let sandbox = &import.sandbox;
    if !sandbox.is_empty() {
        let table = explicit_table(document, "sandbox")?;
        if let Some(mode) = &sandbox.mode {
            set_commented(
                table,
                "sandbox.mode",
                Value::from(mode.value),
                &mode.origin,
                &mut merged,
            );
        }
        if let Some(network) = &sandbox.network {
            set_commented(
                table,
                "sandbox.network",
                Value::from(network.value),
                &network.origin,
                &mut merged,
            );
        }
        let mut last_origin = None;
        for dir in &sandbox.writable {
            let writable = table
                .entry("writable")
                .or_insert_with(|| Item::Value(Value::Array(Array::new())))
                .as_array_mut()
                .ok_or("sandbox.writable of the config is not an array")?;
            if writable
                .iter()
                .any(|value| value.as_str() == Some(&dir.value))
            {
                merged.present += 1;
                continue;
            }
            let comment = (last_origin != Some(&dir.origin)).then_some(&*dir.origin);
            last_origin = Some(&dir.origin);
            push_commented(writable, &dir.value, comment);
            merged.added += 1;
        }
    }
    Ok(merged)
}

/// Where imported rules go: `project`'s table (made when missing), else `[permissions]`.
fn rules_table<'d>(
    document: &'d mut DocumentMut,
    project: Option<&Path>,
) -> Result<&'d mut dyn toml_edit::TableLike, String> {
    let Some(project) = project else {
        return explicit_table(document, "permissions");
    };
    let tables = project_tables(document)?;
    let project_text = project.display().to_string();
    let found = tables.iter().position(|table| names(table, &project_text));
    let index = match found {
        Some(index) => index,
        None => {
            let mut table = Table::new();
            table.insert("path", toml_edit::value(project_text));
            tables.push(table);
            tables.len() - 1
        }
    };
    Ok(tables.get_mut(index).expect("the table just found or made"))
}

/// A top-level table, made when missing, with its header shown.
fn explicit_table<'d>(
    document: &'d mut DocumentMut,
    key: &str,
) -> Result<&'d mut dyn toml_edit::TableLike, String> {
    let item = document
        .entry(key)
        .or_insert_with(|| Item::Table(Table::new()));
    if let Some(table) = item.as_table_mut() {
        table.set_implicit(false);
    }
    item.as_table_like_mut()
        .ok_or_else(|| format!("[{key}] of the config is not a table"))
}

/// Adds `text` to a list on a line of its own, after a comment line when one is given (a
/// comment that closed the list is kept before it).
fn push_commented(array: &mut Array, text: &str, comment: Option<&str>) {
    let closing = array.trailing().as_str().unwrap_or_default().to_owned();
    let kept = if closing.contains('#') {
        closing.trim_end()
    } else {
        ""
    };
    let mut value = Value::from(text);
    let prefix = match comment {
        Some(comment) => format!("{kept}\n  # {comment}\n  "),
        None => format!("{kept}\n  "),
    };
    value.decor_mut().set_prefix(prefix);
    array.push_formatted(value);
    array.set_trailing("\n");
    array.set_trailing_comma(true);
}

/// Sets `path`'s key in `table` to `value`, commented with where it came from; the key keeps
/// its place (and the comments above it) when the table has it.
fn set_commented(
    table: &mut dyn toml_edit::TableLike,
    path: &str,
    mut value: Value,
    origin: &str,
    merged: &mut Merged,
) {
    let key = path.rsplit('.').next().unwrap_or(path);
    let shown = value.to_string();
    value.decor_mut().set_suffix(format!("  # {origin}"));
    match table.get_mut(key) {
        Some(item) => {
            let old = item
                .as_value()
                .map(|old| old.clone().decorated("", "").to_string());
            if old.as_deref() == Some(shown.as_str()) {
                merged.present += 1;
                return;
            }
            merged.replaced.push(format!(
                "{path}: {} → {shown}",
                old.as_deref().unwrap_or("(not a value)")
            ));
            *item = Item::Value(value);
        }
        None => {
            table.insert(key, Item::Value(value));
            merged.added += 1;
        }
    }
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

    fn sample_import() -> Import {
        use super::super::import::{ImportedRule, Sourced};
        let rule = |list, rule: &str, origin: &str| ImportedRule {
            list,
            rule: rule.to_owned(),
            origin: origin.to_owned(),
        };
        let mut import = Import {
            rules: vec![
                rule(RuleList::Allow, "run_command(cargo test *)", "~/a.json"),
                rule(RuleList::Allow, "read_file", "~/a.json"),
                rule(RuleList::Deny, "run_command(rm *)", "~/b.rules:3: no"),
            ],
            sandboxed_commands: Some(Sourced {
                value: "ask",
                origin: "~/c.toml: approval_policy".to_owned(),
            }),
            ..Import::default()
        };
        import.sandbox.mode = Some(Sourced {
            value: "read_only",
            origin: "~/c.toml: sandbox_mode".to_owned(),
        });
        import.sandbox.writable.push(Sourced {
            value: "/data".to_owned(),
            origin: "~/c.toml: writable_roots".to_owned(),
        });
        import
    }

    #[test]
    fn an_import_renders_as_a_commented_config() {
        let text = render_import(None, &sample_import()).unwrap();
        pretty_assertions::assert_eq!(
            text,
            r#"[permissions]
allow = [
  # ~/a.json
  "run_command(cargo test *)",
  "read_file",
]
deny = [
  # ~/b.rules:3: no
  "run_command(rm *)",
]
sandboxed_commands = "ask"  # ~/c.toml: approval_policy

[sandbox]
mode = "read_only"  # ~/c.toml: sandbox_mode
writable = [
  # ~/c.toml: writable_roots
  "/data",
]
"#
        );
    }

    #[test]
    fn an_import_merges_into_a_config_keeping_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let before = "# mine\n[permissions]\nallow = [\"read_file\"] # kept\n\n[sandbox]\n# the mode\nmode = \"off\"\n";
        std::fs::write(&file, before).unwrap();
        let merged = write_import(&file, None, &sample_import()).unwrap();
        assert_eq!(merged.added, 4);
        assert_eq!(merged.present, 1);
        assert_eq!(merged.replaced, ["sandbox.mode: \"off\" → \"read_only\""]);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("# mine\n[permissions]\n"), "{text}");
        assert!(text.contains("# the mode\nmode = \"read_only\""), "{text}");
        let config = crate::config::Config::from_toml(&text, &file).unwrap();
        assert_eq!(
            config.rules.rules.allow,
            ["read_file", "run_command(cargo test *)"]
        );
        assert_eq!(config.rules.rules.deny, ["run_command(rm *)"]);
        let again = write_import(&file, None, &sample_import()).unwrap();
        assert_eq!((again.added, again.present), (0, 6));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

        let mut scoped = sample_import();
        scoped.scope_to_project(Path::new("/p"));
        assert_eq!(scoped.dropped.len(), 3);
        write_import(&file, Some(Path::new("/p")), &scoped).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let config = crate::config::Config::from_toml(&text, &file).unwrap();
        assert_eq!(config.rules.projects[0].path, Path::new("/p"));
        assert_eq!(
            config.rules.projects[0].rules.allow,
            ["run_command(cargo test *)", "read_file"]
        );
    }
}
