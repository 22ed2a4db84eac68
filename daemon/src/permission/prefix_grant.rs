//! Which "allow for this session" grants widen from the exact command to `PROGRAM SUBCOMMAND *`.
//!
//! The tables are a whitelist because the commands that must keep exact grants — those that run
//! other programs or code named by their arguments — are an open set: every shell, wrapper and
//! interpreter, plus ordinary-looking tools with a single such option (`git fetch --upload-pack`,
//! `sort --compress-program`, `rg --pre`, `go build -toolexec`). A grant widens only where we have
//! checked that other arguments cannot make the command run something new: either no option names
//! a program or code to run, or the command's whole job is running the project's own code (builds,
//! tests, package scripts), which approving it once already allowed. Anything unlisted, and every
//! program written as a path, keeps an exact grant.

/// Stands for a package script name in a subcommand entry: any word not starting with `-`.
const SCRIPT: &str = "{script}";

/// Programs granted as `PROGRAM SUBCOMMAND *`. A multi-word entry (`mod tidy`) fixes that many
/// words. The subcommand must follow the program directly, so a global option before it
/// (`git -C dir log`, `git -c k=v log`, `cargo +nightly test`) matches no entry.
#[rustfmt::skip] // compact rows keep the tables scannable
const SUBCOMMAND_TOOLS: &[(&str, &[&str])] = &[
    // Not fetch/pull/push/clone/ls-remote/archive (--upload-pack, --receive-pack, --exec name a
    // program), grep (-O names a pager), merge/cherry-pick/revert (-s picks a git-merge-* program),
    // rebase (-x), bisect (run), submodule (foreach), difftool/mergetool, config, init (--template
    // installs hooks), filter-branch, send-email; nor aliases, which can expand to anything. Nor
    // what discards work or history with another option (checkout, restore, reset, clean, rm,
    // mv, stash, branch, tag, remote, worktree, reflog): approving `git checkout feature` must
    // not approve `git checkout -- .`.
    ("git", &[
        "status", "log", "diff", "show", "blame", "add", "commit", "switch", "rev-parse",
        "rev-list", "ls-files", "ls-tree", "describe", "shortlog", "merge-base", "show-ref",
    ]),
    // These run the project's build scripts, proc macros or tests anyway (so `--config` naming a
    // rustc wrapper or runner adds nothing), or only format. Not install (puts binaries on PATH),
    // tree/metadata/update/fetch/add/search/… (their `--config` can name a rustc or credential
    // program while they otherwise run no project code), nor unknown names (run `cargo-NAME`).
    ("cargo", &["build", "check", "test", "clippy", "doc", "bench", "run", "fmt"]),
    // Scripts and lockfile installs run the project's own code. Not install/i/add (`-g` puts
    // packages on PATH, and each new package is new third-party code), exec/x/create/init (run a
    // package's binary), outdated/audit (`--git` names a program).
    ("npm", &["run {script}", "run-script {script}", "test", "t", "ci", "ls"]),
    // Not install/add (`-g`), exec/dlx/create, nor bare script names (fall back to exec).
    ("pnpm", &["run {script}", "test", "ls"]),
    // Not `run` and other bare names: they also run dependency binaries such as ts-node, whose
    // arguments are code. Not add (new third-party code) nor dlx.
    ("yarn", &["test", "build", "lint", "install"]),
    // `bun run` and `bun FILE` run any file or binary; `bun x` is bunx; `bun add -g`.
    ("bun", &["test"]),
    // `go test` runs the project's code anyway. Not build/vet/list/install (-toolexec, -vettool
    // name a program while they otherwise run none), run (also runs remote `pkg@version`),
    // generate (runs //go:generate commands), tool, env (`-w` writes config).
    ("go", &[
        "test", "fmt", "get", "mod tidy", "mod download", "mod verify", "mod graph", "mod why",
    ]),
    ("ruff", &["check", "format"]),
    // `uv sync` builds the project into its own venv. Not run, tool, pip (`pip install` puts
    // packages on PATH), lock (`--python` names an interpreter while it runs no project code).
    ("uv", &["sync"]),
    // Not run, shell, add (new third-party code), env.
    ("poetry", &["install", "build", "lock", "show", "check"]),
];

/// Programs granted as `PROGRAM *`: no subcommands, and no option that names a program or code to
/// run (test runners and linters run the project's own tests and config files anyway). Not rg
/// (--pre), sed (`e`), awk (system()), sort (--compress-program), tar (--to-command), find
/// (-exec), wget (--use-askpass), mypy (--python-executable), pylint (--init-hook), pip
/// (--python), patch, ln, less.
#[rustfmt::skip]
const PLAIN_TOOLS: &[&str] = &[
    // Test runners, type checkers, linters and formatters.
    "pytest", "jest", "vitest", "tsc", "eslint", "prettier", "rustfmt", "gofmt", "black", "isort",
    "flake8", "shellcheck",
    // File inspection, and making files. Not rm, cp, mv, chmod (approving `rm build/x.o` must
    // not approve `rm -rf ~` where no sandbox bounds it), nor curl (`-d @file` sends a file), nor echo,
    // which needs no grant worth widening.
    "ls", "cat", "head", "tail", "wc", "grep", "diff", "jq", "du", "df", "stat", "file", "which",
    "tree", "mkdir", "touch",
];

/// The rule pattern an "allow for this session" answer grants for one simple command — its
/// program and subcommand followed by ` *` — or `None` when the command keeps an exact grant.
/// `words`: the command's words, quotes removed, all literal, the program first (as written:
/// may be a path like `/usr/bin/git`; a path program keeps an exact grant — a pattern
/// `git log *` must never be granted for `./git log` or `/tmp/x/git log`).
pub(super) fn prefix_pattern(words: &[String]) -> Option<String> {
    // Lookups compare the program word exactly, so a path never matches a table name.
    let (program, args) = words.split_first()?;
    let fixed_words = if PLAIN_TOOLS.contains(&program.as_str()) {
        1
    } else {
        let (_, subcommands) = SUBCOMMAND_TOOLS.iter().find(|(name, _)| *name == program)?;
        1 + subcommands
            .iter()
            .find_map(|entry| subcommand_words(entry, args))?
    };
    let fixed = &words[..fixed_words];
    // A `*` or space in a fixed word would be read as part of the pattern, not literally.
    fixed
        .iter()
        .all(|word| is_literal_word(word))
        .then(|| format!("{} *", fixed.join(" ")))
}

/// How many leading `args` the subcommand `entry` fixes, if they match it.
fn subcommand_words(entry: &str, args: &[String]) -> Option<usize> {
    let wanted: Vec<&str> = entry.split(' ').collect();
    let given = args.get(..wanted.len())?;
    let matches = wanted.iter().zip(given).all(|(want, word)| {
        if *want == SCRIPT {
            !word.starts_with('-') // an option before the script name: exact grant
        } else {
            want == word
        }
    });
    matches.then_some(wanted.len())
}

fn is_literal_word(word: &str) -> bool {
    !word.is_empty() && !word.contains('*') && !word.contains(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern_for(words: &[&str]) -> Option<String> {
        let words: Vec<String> = words.iter().map(|word| word.to_string()).collect();
        prefix_pattern(&words)
    }

    /// Each command is split on single spaces; words with spaces are tested separately.
    fn check(cases: &[(&str, Option<&str>)]) {
        for (command, expected) in cases {
            let words: Vec<&str> = command.split(' ').collect();
            assert_eq!(
                pattern_for(&words).as_deref(),
                *expected,
                "command: {command}"
            );
        }
    }

    #[test]
    fn git_grants_ordinary_subcommands_only() {
        check(&[
            ("git log -1", Some("git log *")),
            ("git log", Some("git log *")),
            ("git status --short", Some("git status *")),
            ("git diff --stat HEAD~1", Some("git diff *")),
            ("git commit -m wip", Some("git commit *")),
            ("git -c core.pager=x log", None),
            ("git --exec-path=/tmp log", None),
            ("git -C /repo log", None),
            ("git -p log", None),
            ("git config user.name x", None),
            ("git rebase -i main", None),
            ("git rebase --exec x main", None),
            ("git bisect run x", None),
            ("git submodule foreach x", None),
            ("git fetch --upload-pack=x origin", None),
            ("git pull", None),
            ("git push origin main", None),
            ("git grep -O foo", None),
            ("git merge -s x main", None),
            ("git difftool", None),
            ("git mergetool", None),
            ("git filter-branch", None),
            ("git send-email x", None),
            ("git init --template=x", None),
            ("git my-alias", None),
            ("git", None),
        ]);
    }

    #[test]
    fn program_given_as_a_path_keeps_an_exact_grant() {
        check(&[
            ("/usr/bin/git log", None),
            ("./git log", None),
            ("/tmp/x/git log", None),
            ("bin/cargo test", None),
            ("./ls", None),
        ]);
    }

    #[test]
    fn cargo_grants_project_code_subcommands() {
        check(&[
            ("cargo test --release", Some("cargo test *")),
            ("cargo test", Some("cargo test *")),
            ("cargo run --bin x", Some("cargo run *")),
            ("cargo clippy --all-targets", Some("cargo clippy *")),
            ("cargo fmt --check", Some("cargo fmt *")),
            ("cargo +nightly test", None),
            ("cargo --config x=1 test", None),
            ("cargo -Zunstable test", None),
            ("cargo install ripgrep", None),
            ("cargo foo", None),
            ("cargo tree", None),
            ("cargo", None),
        ]);
    }

    #[test]
    fn javascript_package_managers_grant_scripts_not_runners() {
        check(&[
            ("npm run test -- --watch", Some("npm run test *")),
            ("npm run build", Some("npm run build *")),
            ("npm run-script lint:fix", Some("npm run-script lint:fix *")),
            ("npm test", Some("npm test *")),
            ("npm t", Some("npm t *")),
            ("npm ci", Some("npm ci *")),
            ("npm run -s test", None),
            ("npm run", None),
            ("npm exec foo", None),
            ("npm x foo", None),
            ("npm install lodash", None),
            ("npm i -g x", None),
            ("npm create vite", None),
            ("pnpm run build", Some("pnpm run build *")),
            ("pnpm test", Some("pnpm test *")),
            ("pnpm dlx foo", None),
            ("pnpm exec foo", None),
            ("pnpm add -g x", None),
            ("pnpm build", None),
            ("yarn test --watch", Some("yarn test *")),
            ("yarn install", Some("yarn install *")),
            ("yarn dlx foo", None),
            ("yarn run ts-node -e x", None),
            ("yarn add x", None),
            ("bun test", Some("bun test *")),
            ("bun run x", None),
            ("bun x foo", None),
            ("bun index.ts", None),
        ]);
    }

    #[test]
    fn go_grants_tests_and_module_maintenance() {
        check(&[
            ("go mod tidy", Some("go mod tidy *")),
            ("go mod download -x", Some("go mod download *")),
            ("go test ./...", Some("go test *")),
            ("go fmt ./...", Some("go fmt *")),
            ("go mod", None),
            ("go mod edit -replace x=y", None),
            ("go generate ./...", None),
            ("go tool pprof", None),
            ("go env -w GOFLAGS=x", None),
            ("go run .", None),
            ("go build -toolexec x ./...", None),
            ("go vet -vettool=x", None),
        ]);
    }

    #[test]
    fn python_tools() {
        check(&[
            ("pytest -x tests", Some("pytest *")),
            ("pytest", Some("pytest *")),
            ("ruff check .", Some("ruff check *")),
            ("ruff format", Some("ruff format *")),
            ("uv sync --frozen", Some("uv sync *")),
            ("poetry install", Some("poetry install *")),
            ("python3 -m pytest", None),
            ("ruff", None),
            ("uv run pytest", None),
            ("uv pip install x", None),
            ("poetry run x", None),
            ("pip install x", None),
            ("pip3 list", None),
            ("pipx run x", None),
            ("mypy --python-executable x", None),
            ("pylint --init-hook=x", None),
        ]);
    }

    #[test]
    fn plain_tools_grant_any_arguments() {
        check(&[
            ("ls -la", Some("ls *")),
            ("ls", Some("ls *")),
            ("cat a b", Some("cat *")),
            ("jq .x f.json", Some("jq *")),
            ("eslint --fix src", Some("eslint *")),
            ("rg foo", None),
            ("sed -i s/a/b/ f", None),
            ("awk {print} f", None),
            ("sort --compress-program=x f", None),
            ("tar -I x -xf a.tar", None),
            ("find . -exec x ;", None),
            ("wget --use-askpass=x u", None),
            ("ln -s a b", None),
            ("patch -p1", None),
        ]);
    }

    #[test]
    fn wrappers_and_runners_keep_exact_grants() {
        check(&[
            ("bash -c x", None),
            ("npx jest", None),
            ("make test", None),
            ("timeout 5 cargo test", None),
            ("env FOO=1 x", None),
            ("FOO=1 cargo test", None),
            ("sudo git log", None),
            ("xargs git log", None),
            ("docker run x", None),
            ("docker exec x", None),
            ("kubectl exec x", None),
            ("ssh host ls", None),
        ]);
    }

    /// Programs that run other programs or code named by their arguments: whatever their
    /// arguments, no grant may widen. Guards the tables against a careless addition.
    #[rustfmt::skip]
    const RUNS_WHAT_ITS_ARGUMENTS_NAME: &[&str] = &[
        "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "env", "xargs", "sudo", "doas",
        "su", "timeout", "nice", "nohup", "stdbuf", "time", "watch", "exec", "eval", "command",
        "builtin", "setsid", "chroot", "flock", "parallel", "python", "python3", "python3.12",
        "node", "deno", "bunx", "ruby", "perl", "php", "lua", "Rscript", "java", "make", "just",
        "ninja", "npx", "pnpx", "uvx", "pipx", "find", "ssh", "docker", "kubectl", "rg", "sed",
        "awk", "sort", "tar", "wget", "mypy", "pylint", "pip", "pip3", "less", "ln", "patch",
    ];

    #[test]
    fn no_runner_is_granted_whatever_follows() {
        for program in RUNS_WHAT_ITS_ARGUMENTS_NAME {
            for rest in [&[][..], &["x"], &["test"], &["run", "test"], &["-c", "x"]] {
                let words: Vec<&str> = [*program].iter().chain(rest).copied().collect();
                assert_eq!(pattern_for(&words), None, "words: {words:?}");
            }
        }
    }

    #[test]
    fn pattern_words_must_be_literal() {
        assert_eq!(pattern_for(&[]), None);
        assert_eq!(pattern_for(&["npm", "run", "te*st"]), None);
        assert_eq!(pattern_for(&["npm", "run", "a b"]), None);
        assert_eq!(pattern_for(&["npm", "run", "a\tb"]), None);
        assert_eq!(pattern_for(&["npm", "run", ""]), None);
        assert_eq!(pattern_for(&["", "log"]), None);
        assert_eq!(pattern_for(&["git log", "-1"]), None);
        // Arguments after the fixed words are covered by the trailing `*`, whatever they hold.
        assert_eq!(
            pattern_for(&["git", "commit", "-m", "fix *all* the things"]).as_deref(),
            Some("git commit *")
        );
    }

    #[test]
    fn table_entries_are_unique_literal_words() {
        let mut programs: Vec<&str> = PLAIN_TOOLS.to_vec();
        programs.extend(SUBCOMMAND_TOOLS.iter().map(|(name, _)| *name));
        let count = programs.len();
        programs.sort_unstable();
        programs.dedup();
        assert_eq!(programs.len(), count, "a program is listed twice");
        for (program, subcommands) in SUBCOMMAND_TOOLS {
            for word in subcommands.iter().flat_map(|entry| entry.split(' ')) {
                assert!(
                    is_literal_word(word) && !word.starts_with('-'),
                    "{program}: {word}"
                );
            }
        }
        for program in programs {
            assert!(
                is_literal_word(program) && !program.contains('/'),
                "{program}"
            );
        }
    }
}
