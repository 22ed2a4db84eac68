//! The files that common programs write because of their arguments (`tee F`, `git log
//! --output=F`, `sed -i … F`, `cp … DEST`, `dd of=F`), so that the engine judges them as it
//! judges a redirection's target: against the roots, the protected paths and the write rules.
//!
//! An allow rule for a program allows what the program does with its arguments, but a file it
//! is told to write is a write like `> F`: `allow run_command(git log *)` must not cover
//! `git log --output=.git/config`. Programs not listed here still write what they write; the
//! command sandbox bounds those. The reading is rough in the safe direction: a word that may be
//! a written file is judged as one (a relative name inside the roots costs nothing; one outside,
//! or a protected one, asks).

/// The files the program `name` writes because of its arguments `args`: each with the index of
/// the word it comes from (whose computed parts make it computed).
pub(super) fn files_written(name: &str, args: &[String]) -> Vec<(usize, String)> {
    match name {
        // Every operand is a file written (`tee`), made (`touch`, `mkdir`'s directories are
        // harmless but `touch .git/HEAD` is not), cut (`truncate`) or made executable (`chmod
        // +x .git/hooks/…`): the mode word is judged too, harmlessly.
        "tee" | "touch" | "truncate" | "chmod" | "chown" | "chgrp" => operands(args),
        // Removing is writing: `rm` of toold's config takes its deny rules away, `rm` of
        // `.git/HEAD` unmakes a repository.
        "rm" | "rmdir" | "unlink" | "shred" => operands(args),
        "cp" | "mv" | "install" | "ln" | "link" | "rsync" => copied(name, args),
        // `sed -i` edits its file operands in place (the script is judged too, harmlessly).
        "sed" if args.iter().any(|arg| is_in_place(arg)) => operands(args),
        "perl" | "ruby" if args.iter().any(|arg| is_in_place(arg)) => operands(args),
        "dd" => args
            .iter()
            .enumerate()
            .filter_map(|(at, arg)| Some((at, arg.strip_prefix("of=")?.to_owned())))
            .collect(),
        "sort" | "uniq" => option_values(args, &["-o"], &["--output"]),
        // Any git command: `log`, `diff`, `show` and the rest take `--output`; `format-patch`
        // writes into `-o`'s directory.
        "git" => option_values(args, &["-o"], &["--output", "--output-directory"]),
        "curl" | "wget" => option_values(
            args,
            &["-o", "-D", "-c"],
            &[
                "--output",
                "--output-document",
                "--dump-header",
                "--cookie-jar",
            ],
        ),
        _ => Vec::new(),
    }
}

/// What a copy, move or link writes. Its destination (the last operand, or `-t DIR`); inside
/// it, the name each source takes there (`cp -r evil/.git .` writes `./.git`, `cp -r x/toold
/// config/` writes `config/toold`), and, when a source's contents land there instead (`rsync
/// src/ dst`, `cp -T`, `cp src/. dst`), a `.git` that may be among them. Also the sources of
/// `mv` (it takes them away) and of a link (`ln`, `cp -s`/`-l`): a second name for a file is a
/// way to write it later, so linking a protected file asks as writing it does.
fn copied(name: &str, args: &[String]) -> Vec<(usize, String)> {
    let targets = option_values(args, &["-t"], &["--target-directory"]);
    let mut sources = operands(args);
    // `-t DIR`'s value is also taken for an operand.
    sources.retain(|(at, _)| !targets.iter().any(|(target, _)| target == at));
    let destination = match targets.into_iter().next() {
        Some(target) => target,
        None => match sources.pop() {
            Some(last) => last,
            None => return Vec::new(),
        },
    };
    let links = makes_links(name, args);
    let contents = match name {
        "rsync" => sources.iter().any(|(_, source)| source.ends_with('/')),
        "cp" | "mv" => {
            has_short_flag(args, &['T'])
                || args.iter().any(|arg| arg == "--no-target-directory")
                || sources.iter().any(|(_, source)| source.ends_with("/."))
        }
        _ => false,
    };
    let inside = destination.1.trim_end_matches('/');
    let mut written = vec![destination.clone()];
    for (at, source) in &sources {
        if let Some(base) = std::path::Path::new(source).file_name() {
            written.push((*at, format!("{inside}/{}", base.to_string_lossy())));
        }
        if links || name == "mv" {
            written.push((*at, source.clone()));
        }
    }
    if contents {
        written.push((destination.0, format!("{inside}/.git")));
    }
    written
}

/// Whether the command makes links (`ln`, `link`, `cp -s`/`-l`/`--link`/`--symbolic-link`):
/// a path written after it in the same line may lead through one made a moment before.
pub(super) fn makes_links(name: &str, args: &[String]) -> bool {
    matches!(name, "ln" | "link")
        || (name == "cp"
            && (has_short_flag(args, &['s', 'l'])
                || args
                    .iter()
                    .any(|arg| arg == "--link" || arg == "--symbolic-link")))
}

/// Whether a short-option word (`-rs`) holds one of `flags`.
fn has_short_flag(args: &[String], flags: &[char]) -> bool {
    args.iter()
        .any(|arg| arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains(flags))
}

/// `-i`, `-i.bak`, `--in-place[=SUFFIX]`, or `-i` bundled with other short options (`-ni`):
/// any short-option word holding an `i` counts.
fn is_in_place(arg: &str) -> bool {
    arg == "--in-place"
        || arg.starts_with("--in-place=")
        || (arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains('i'))
}

/// The arguments that are not options: after `--` all of them, before it those not starting
/// with `-`.
fn operands(args: &[String]) -> Vec<(usize, String)> {
    let mut operands = Vec::new();
    let mut options_end = false;
    for (at, arg) in args.iter().enumerate() {
        if options_end || !arg.starts_with('-') || arg == "-" {
            if arg != "-" {
                operands.push((at, arg.clone()));
            }
        } else if arg == "--" {
            options_end = true;
        }
    }
    operands
}

/// The values of the short options `short` (`-o F`, `-oF`) and the long options `long`
/// (`--output F`, `--output=F`), before any `--`.
fn option_values(args: &[String], short: &[&str], long: &[&str]) -> Vec<(usize, String)> {
    let mut values = Vec::new();
    let mut words = args.iter().enumerate();
    while let Some((at, arg)) = words.next() {
        if arg == "--" {
            break;
        }
        if let Some((name, value)) = arg.split_once('=')
            && long.contains(&name)
        {
            values.push((at, value.to_owned()));
        } else if long.contains(&arg.as_str()) || short.contains(&arg.as_str()) {
            if let Some((next, value)) = words.next() {
                values.push((next, value.clone()));
            }
        } else if let Some(value) = short
            .iter()
            .find_map(|option| arg.strip_prefix(option).filter(|value| !value.is_empty()))
            && !arg.starts_with("--")
        {
            values.push((at, value.to_owned()));
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(line: &str) -> Vec<String> {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        files_written(&words[0], &words[1..])
            .into_iter()
            .map(|(_, path)| path)
            .collect()
    }

    #[test]
    fn files_programs_are_told_to_write_are_found() {
        assert_eq!(written("tee -a out .git/config"), ["out", ".git/config"]);
        assert_eq!(written("git log -1 --output=.git/config"), [".git/config"]);
        assert_eq!(
            written("git log --output .git/hooks/x -p"),
            [".git/hooks/x"]
        );
        assert_eq!(written("git format-patch -o /tmp/p HEAD~1"), ["/tmp/p"]);
        assert_eq!(
            written("sed -i s/a/b/ .git/config"),
            ["s/a/b/", ".git/config"]
        );
        assert_eq!(written("sed -ni.bak p f"), ["p", "f"]);
        assert!(written("sed s/a/b/ f").is_empty());
        assert_eq!(
            written("cp -r src /outside/dest"),
            ["/outside/dest", "/outside/dest/src"]
        );
        assert_eq!(
            written("mv -t /outside a b"),
            ["/outside", "/outside/a", "a", "/outside/b", "b"]
        );
        assert_eq!(written("mv a/config b"), ["b", "b/config", "a/config"]);
        // Into a directory: the names the sources take there.
        assert_eq!(written("cp -r /tmp/evil/.git ."), [".", "./.git"]);
        assert_eq!(
            written("cp -r /tmp/evil/toold config/"),
            ["config/", "config/toold"]
        );
        // Contents into a directory: a `.git` may be among them.
        assert_eq!(written("rsync -a evil/ ."), [".", "./evil", "./.git"]);
        assert_eq!(written("cp -rT evil ."), [".", "./evil", "./.git"]);
        // A link is a second name for its source.
        assert_eq!(
            written("ln config/toold/config.toml work/h"),
            ["work/h", "work/h/config.toml", "config/toold/config.toml"]
        );
        assert_eq!(
            written("cp -s config/toold/config.toml work/l"),
            ["work/l", "work/l/config.toml", "config/toold/config.toml"]
        );
        assert_eq!(written("cp -al a b"), ["b", "b/a", "a"]);
        assert_eq!(written("rm -rf state/toold x"), ["state/toold", "x"]);
        assert_eq!(written("unlink .git/HEAD"), [".git/HEAD"]);
        let words = ["-a".to_owned(), "$f".to_owned()];
        assert_eq!(files_written("tee", &words), [(1, "$f".to_owned())]);
        assert_eq!(written("dd if=x of=/dev/sda"), ["/dev/sda"]);
        assert_eq!(written("sort -o out in"), ["out"]);
        assert_eq!(written("sort -oout in"), ["out"]);
        assert_eq!(written("curl -o f https://x"), ["f"]);
        assert_eq!(
            written("chmod +x .git/hooks/pre-commit"),
            ["+x", ".git/hooks/pre-commit"]
        );
        assert_eq!(written("touch -- -x"), ["-x"]);
        assert!(written("git status --short").is_empty());
        assert!(written("echo -o x").is_empty());
    }
}
