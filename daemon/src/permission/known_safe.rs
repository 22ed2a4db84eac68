//! The built-in whitelist of read-only commands that may run unconfined without asking.
//!
//! When no sandbox confines a command, the permission engine still lets it run unasked if it
//! is one of the read-only programs below, used only with options known not to write files,
//! run other programs, reach the network or block forever. It is a whitelist on purpose: an
//! unknown program, an unknown option, or an operand the program would write to makes the
//! command not known-safe, because a wrong guess runs something the user never approved.
//! Options are parsed the way each program parses them (clustered short flags, glued or
//! separate values, `--`), so a dangerous option cannot hide inside a cluster, and every file
//! the command reads is returned so the caller can check it lies inside the session's roots.

use std::path::Path;

/// Directories a program word may name explicitly. Anywhere else (`./ls`, `/tmp/x/cat`) the
/// file could be a look-alike script rather than the real tool.
const SYSTEM_BIN_DIRS: &[&str] = &["/bin", "/usr/bin", "/usr/local/bin"];

/// What a known-safe command reads: the operands that name files or directories (so the
/// caller can check they are inside the session's roots). `None`: the command is not known-safe.
pub(super) fn known_safe(words: &[String]) -> Option<Vec<String>> {
    let (program, args) = words.split_first()?;
    match program_name(program)? {
        "find" => find(args),
        "git" => git(args),
        name => {
            let rule = rule(name)?;
            let parsed = parse(args, rule.options, rule.count_shorthand)?;
            rule.operands.paths(parsed)
        }
    }
}

fn program_name(word: &str) -> Option<&str> {
    match word.rsplit_once('/') {
        None => Some(word),
        Some((dir, name)) if SYSTEM_BIN_DIRS.contains(&dir) => Some(name),
        Some(_) => None,
    }
}

/// How an option takes its value; in a spec token it is the last character: none (a flag),
/// `:` a value, `@` a value naming a file it reads, `?` an optional value that must be glued
/// (`--color=never`, `-uno`), `~` the next word unless the option is last (git's
/// `branch --merged [commit]`).
#[derive(Clone, Copy, PartialEq)]
enum Takes {
    Nothing,
    Value,
    PathValue,
    GluedValue,
    ValueUnlessLast,
}

/// Accepted by every table-driven program: they only print text.
const COMMON: &str = "--help --version";

fn lookup(specs: &[&str], option: &str) -> Option<Takes> {
    let tokens = specs
        .iter()
        .chain([&COMMON])
        .flat_map(|spec| spec.split_whitespace());
    tokens
        .map(split_spec)
        .find(|(name, _)| *name == option)
        .map(|(_, takes)| takes)
}

fn split_spec(token: &str) -> (&str, Takes) {
    let marks = [
        (':', Takes::Value),
        ('@', Takes::PathValue),
        ('?', Takes::GluedValue),
        ('~', Takes::ValueUnlessLast),
    ];
    for (mark, takes) in marks {
        if let Some(name) = token.strip_suffix(mark) {
            return (name, takes);
        }
    }
    (token, Takes::Nothing)
}

#[derive(Default)]
struct Parsed {
    operands: Vec<String>,
    option_paths: Vec<String>,
    /// Options given, by the name used (`-e`, `--list`), for rules that depend on them.
    seen: Vec<String>,
}

impl Parsed {
    fn record(&mut self, name: String, takes: Takes, value: Option<String>) {
        if let (Takes::PathValue, Some(path)) = (takes, value) {
            self.option_paths.push(path);
        }
        self.seen.push(name);
    }

    fn saw(&self, options: &[&str]) -> bool {
        self.seen
            .iter()
            .any(|seen| options.contains(&seen.as_str()))
    }
}

/// Parses GNU-style: options may follow operands, `--` ends them, long options are matched
/// exactly (a getopt abbreviation like `--out` is refused rather than expanded). With
/// `count_shorthand`, a word of digits such as `-5` is a line count (`head -5`).
fn parse(args: &[String], specs: &[&str], count_shorthand: bool) -> Option<Parsed> {
    let mut parsed = Parsed::default();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            parsed.operands.extend(words.cloned());
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            let (name, glued) = match long.split_once('=') {
                Some((name, value)) => (format!("--{name}"), Some(value)),
                None => (word.clone(), None),
            };
            let takes = lookup(specs, &name)?;
            let value = option_value(takes, glued, &mut words)?;
            parsed.record(name, takes, value);
        } else if let Some(cluster) = word.strip_prefix('-').filter(|c| !c.is_empty()) {
            if count_shorthand && cluster.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            for (at, flag) in cluster.char_indices() {
                let name = format!("-{flag}");
                let takes = lookup(specs, &name)?;
                if takes == Takes::Nothing {
                    parsed.seen.push(name);
                    continue;
                }
                // The rest of the cluster is the value; `-f=x` may mean `x` or `=x` depending
                // on the program, so a file named that way is refused rather than guessed.
                let rest = &cluster[at + flag.len_utf8()..];
                if takes == Takes::PathValue && rest.starts_with('=') {
                    return None;
                }
                let glued = Some(rest).filter(|rest| !rest.is_empty());
                let value = option_value(takes, glued, &mut words)?;
                parsed.record(name, takes, value);
                break;
            }
        } else {
            parsed.operands.push(word.clone());
        }
    }
    Some(parsed)
}

/// The value an option consumes (`Some(None)`: none); `None` if it is missing or not allowed.
fn option_value(
    takes: Takes,
    glued: Option<&str>,
    next_words: &mut std::slice::Iter<String>,
) -> Option<Option<String>> {
    Some(match (takes, glued) {
        (Takes::Nothing, Some(_)) => return None,
        (_, Some(value)) => Some(value.to_owned()),
        (Takes::Value | Takes::PathValue, None) => Some(next_words.next()?.clone()),
        (Takes::ValueUnlessLast, None) => next_words.next().cloned(),
        (Takes::Nothing | Takes::GluedValue, None) => None,
    })
}

/// What a program's operands (non-option words) are.
#[derive(Clone, Copy)]
enum Operands {
    /// Not allowed: for `hostname`, an operand sets the hostname.
    Forbidden,
    /// Strings it only prints or looks up (`basename`, `which`, `tr` sets).
    Text,
    Paths,
    /// `uniq`: a second operand is an output file it writes.
    OnePath,
    /// `grep`/`rg`: a pattern first, unless an option supplied it, then paths.
    PatternThenPaths,
    /// `date`: only `+FORMAT`; any other operand sets the clock.
    PlusFormat,
}

/// Options that supply the pattern (or need none), so every operand is a path.
const PATTERN_SOURCES: &[&str] = &["-e", "--regexp", "-f", "--file", "--files", "--type-list"];

impl Operands {
    fn paths(self, parsed: Parsed) -> Option<Vec<String>> {
        let pattern_given = parsed.saw(PATTERN_SOURCES);
        let Parsed {
            operands,
            option_paths: mut paths,
            ..
        } = parsed;
        let allowed = match self {
            Operands::Forbidden => operands.is_empty(),
            Operands::OnePath => operands.len() <= 1,
            Operands::PlusFormat => {
                operands.len() <= 1 && operands.iter().all(|o| o.starts_with('+'))
            }
            Operands::Text | Operands::Paths | Operands::PatternThenPaths => true,
        };
        if !allowed {
            return None;
        }
        match self {
            Operands::Paths | Operands::OnePath => paths.extend(operands),
            Operands::PatternThenPaths => {
                let pattern = usize::from(!pattern_given);
                paths.extend(operands.into_iter().skip(pattern));
            }
            Operands::Forbidden | Operands::Text | Operands::PlusFormat => {}
        }
        Some(paths)
    }
}

struct Rule {
    options: &'static [&'static str],
    operands: Operands,
    count_shorthand: bool,
}

// Deliberately absent: tail -f/-F/--follow/--pid (never ends), sort -o/-T/--compress-program/
// --files0-from, wc/du --files0-from and du -X (read name lists we cannot check), file -C/-z/-Z/
// -f/-p/-S (compiles, decompresses via helpers, name list, touches atime, unsandboxed), tree -o/
// -R/--fromfile (-R writes 00Tree.html), diff -l (runs pr), date -s, printf -v, hostname -F/-b
// and its resolver lookups, rg --pre/--pre-glob/-z/--hostname-bin (run programs); and every
// option that follows symbolic links met on the way down a tree (ls/du -L, tree -l, grep -R,
// rg -L/--follow, find -L/-follow, diff -r, which follows them): a link in the roots could lead
// the read out of them, where no path of the line names.
const LS: &str = "-a -A -b -B -c -C -d -f -F -g -G -h -H -i -k -l -m -n -N -o -p -q -Q -r \
    -R -s -S -t -u -U -v -x -X -Z -1 -I: -T: -w: --all --almost-all --author --escape \
    --ignore-backups --classify? --color? --directory --file-type --full-time --no-group \
    --group-directories-first --human-readable --si --dereference-command-line --hyperlink? \
    --inode --kibibytes --numeric-uid-gid --literal --hide-control-chars \
    --show-control-chars --quote-name --reverse --recursive --size --context --zero \
    --block-size: --format: --hide: --ignore: --indicator-style: --quoting-style: --sort: \
    --time: --time-style: --tabsize: --width:";
const HEAD_TAIL: &str =
    "-q -v -z -c: -n: --quiet --silent --verbose --zero-terminated --bytes: --lines:";
const CAT: &str = "-A -b -e -E -n -s -t -T -u -v --show-all --number-nonblank --number \
    --squeeze-blank --show-ends --show-tabs --show-nonprinting";
const WC: &str = "-c -m -l -L -w --bytes --chars --lines --words --max-line-length --total:";
const STAT: &str = "-L -f -t -c: --dereference --file-system --terse --format: --printf: --cached:";
const FILE: &str = "-b -c -E -h -i -k -l -L -n -N -r -s -0 -F: -m@ --brief --checking-printout \
    --dereference --no-dereference --keep-going --mime --mime-type --mime-encoding --extension \
    --apple --raw --no-buffer --print0 --special-files --separator: --magic-file@";
const DU: &str = "-0 -a -b -c -D -h -H -k -l -m -P -s -S -x -B: -d: -t: --all \
    --apparent-size --bytes --total --dereference-args --human-readable --si --inodes \
    --count-links --null --no-dereference --separate-dirs --summarize \
    --one-file-system --time? --block-size: --max-depth: --threshold: --time-style: --exclude:";
const DF: &str = "-a -h -H -i -k -l -P -T -B: -t: -x: --all --human-readable --si --inodes \
    --local --no-sync --portability --print-type --total --block-size: --type: --exclude-type:";
const TREE: &str = "-a -d -f -x -i -q -N -Q -p -u -g -s -h -D -F -v -t -c -U -r -n -C -A -S \
    -J -X -L: -P: -I: --noreport --du --si --dirsfirst --filesfirst --prune --matchdirs \
    --ignore-case --gitignore --charset: --filelimit: --timefmt:";
const REALPATH: &str = "-e -m -L -P -q -s -z --canonicalize-existing --canonicalize-missing \
    --logical --physical --quiet --strip --no-symlinks --zero --relative-to@ --relative-base@";
const READLINK: &str = "-f -e -m -n -q -s -v -z --canonicalize --canonicalize-existing \
    --canonicalize-missing --no-newline --quiet --silent --verbose --zero";
const CUT: &str = "-n -s -z -b: -c: -d: -f: --complement --only-delimited --zero-terminated \
    --bytes: --characters: --delimiter: --fields: --output-delimiter:";
const SORT: &str = "-b -c -C -d -f -g -h -i -m -M -n -r -R -s -u -V -z -k: -S: -t: \
    --ignore-leading-blanks --check? --dictionary-order --ignore-case --general-numeric-sort \
    --human-numeric-sort --ignore-nonprinting --merge --month-sort --numeric-sort --reverse \
    --random-sort --stable --unique --version-sort --zero-terminated --debug --key: \
    --buffer-size: --field-separator: --parallel: --sort: --random-source@";
const UNIQ: &str = "-c -d -D -i -u -z -f: -s: -w: --count --repeated --all-repeated? --group? \
    --ignore-case --unique --zero-terminated --skip-fields: --skip-chars: --check-chars:";
const DIFF: &str = "-a -b -B -c -d -e -E -i -n -N -p -q -s -t -T -u -w -y -Z -C: -U: -W: \
    -I: -F: -x: -S: -X@ --text --ignore-space-change --ignore-blank-lines --context? --minimal \
    --ed --ignore-tab-expansion --ignore-case --rcs --new-file --show-c-function --brief \
    --report-identical-files --expand-tabs --initial-tab --unified? \
    --ignore-all-space --side-by-side --ignore-trailing-space --normal --suppress-common-lines \
    --left-column --strip-trailing-cr --speed-large-files --no-dereference --color? \
    --unidirectional-new-file --width: --ignore-matching-lines: --show-function-line: \
    --exclude: --starting-file: --label: --horizon-lines: --tabsize: --exclude-from@ \
    --from-file@ --to-file@";
const TR: &str = "-c -C -d -s -t --complement --delete --squeeze-repeats --truncate-set1";
const CMP: &str = "-b -l -s -i: -n: --print-bytes --verbose --quiet --silent \
    --ignore-initial: --bytes:";
const COMM: &str = "-1 -2 -3 -z --check-order --nocheck-order --total --zero-terminated \
    --output-delimiter:";
const ID: &str = "-a -g -G -n -r -u -z -Z --context --group --groups --name --real --user --zero";
const UNAME: &str = "-a -s -n -r -v -m -p -i -o --all --kernel-name --nodename \
    --kernel-release --kernel-version --machine --processor --hardware-platform \
    --operating-system";
const DATE: &str = "-u -R -I? -d: -r@ -f@ --utc --universal --rfc-email --iso-8601? \
    --rfc-3339: --date: --reference@ --file@ --debug";
const RG: &str = "-a -b -c -F -h -H -i -I -l -n -N -o -P -p -q -s -S -u -U -v -V -w -x -0 \
    -. -A: -B: -C: -d: -e: -E: -g: -j: -m: -M: -r: -t: -T: -f@ --text --byte-offset --count \
    --count-matches --fixed-strings --with-filename --no-filename --ignore-case \
    --files-with-matches --files-without-match --line-number --no-line-number \
    --only-matching --pcre2 --pretty --quiet --case-sensitive --smart-case --multiline \
    --multiline-dotall --invert-match --word-regexp --line-regexp --null --null-data --files \
    --type-list --hidden --no-ignore --no-ignore-vcs --no-ignore-dot --no-ignore-parent \
    --no-ignore-global --no-ignore-exclude --no-messages --json --vimgrep --heading \
    --no-heading --column --no-column --trim --stats --passthru --one-file-system --crlf \
    --no-unicode --max-columns-preview --after-context: --before-context: --context: \
    --max-depth: --regexp: --encoding: --glob: --iglob: --threads: --max-count: \
    --max-columns: --replace: --type: --type-not: --type-add: --color: --colors: --sort: \
    --sortr: --max-filesize: --context-separator: --field-match-separator: --engine: \
    --file@ --ignore-file@";
const GREP: &str = "-a -b -c -E -F -G -h -H -i -I -l -L -n -o -P -q -r -s -T -U -v -w -x \
    -y -z -Z -A: -B: -C: -d: -D: -e: -m: -f@ --text --byte-offset --count --extended-regexp \
    --fixed-strings --basic-regexp --perl-regexp --no-filename --with-filename --ignore-case \
    --no-ignore-case --files-with-matches --files-without-match --line-number \
    --only-matching --quiet --silent --recursive --no-messages \
    --initial-tab --binary --invert-match --word-regexp --line-regexp --null-data --null \
    --line-buffered --color? --colour? --after-context: --before-context: --context: \
    --directories: --devices: --regexp: --max-count: --binary-files: --label: --include: \
    --exclude: --exclude-dir: --file@ --exclude-from@";

fn rule(program: &str) -> Option<Rule> {
    use Operands::*;
    let (options, operands): (&'static [&'static str], Operands) = match program {
        "ls" => (&[LS], Paths),
        "cat" => (&[CAT], Paths),
        "head" | "tail" => (&[HEAD_TAIL], Paths),
        "wc" => (&[WC], Paths),
        "pwd" => (&["-L -P"], Forbidden),
        "stat" => (&[STAT], Paths),
        "file" => (&[FILE], Paths),
        "du" => (&[DU], Paths),
        "df" => (&[DF], Paths),
        "tree" => (&[TREE], Paths),
        "basename" => (&["-a -z -s: --multiple --zero --suffix:"], Text),
        "dirname" => (&["-z --zero"], Text),
        "realpath" => (&[REALPATH], Paths),
        "readlink" => (&[READLINK], Paths),
        "nl" => (&["-p -b: -d: -f: -h: -i: -l: -n: -s: -v: -w:"], Paths),
        "cut" => (&[CUT], Paths),
        "tr" => (&[TR], Text),
        "sort" => (&[SORT], Paths),
        "uniq" => (&[UNIQ], OnePath),
        "diff" => (&[DIFF], Paths),
        "cmp" => (&[CMP], Paths),
        "comm" => (&[COMM], Paths),
        "which" => (&["-a -s"], Text),
        "type" => (&["-a -f -p -P -t"], Text),
        "id" => (&[ID], Text),
        "whoami" => (&[], Forbidden),
        "uname" => (&[UNAME], Forbidden),
        "date" => (&[DATE], PlusFormat),
        // Only the name the kernel already has: -f/-d/-i/-A and friends query the resolver.
        "hostname" => (&["-s --short"], Forbidden),
        "rg" => (&[RG], PatternThenPaths),
        "grep" | "egrep" | "fgrep" => (&[GREP], PatternThenPaths),
        _ => return None,
    };
    let count_shorthand = matches!(program, "head" | "tail" | "grep" | "egrep" | "fgrep");
    Some(Rule {
        options,
        operands,
        count_shorthand,
    })
}

/// `find`'s expression words, in the spec syntax (`:` takes one word, `@` a file it reads).
/// Never -exec/-execdir/-ok/-okdir (run programs), -delete, -fprint*/-fls (write files).
const FIND_EXPRESSION: &str = "-name: -iname: -path: -ipath: -wholename: -iwholename: -regex: \
    -iregex: -lname: -ilname: -type: -xtype: -size: -mtime: -mmin: -atime: -amin: -ctime: \
    -cmin: -used: -maxdepth: -mindepth: -perm: -user: -group: -uid: -gid: -links: -inum: \
    -fstype: -printf: -regextype: -newer@ -anewer@ -cnewer@ -samefile@ -empty -nouser \
    -nogroup -print -print0 -ls -prune -quit -true -false -not -a -and -o -or ! ( ) , \
    -readable -writable -executable -depth -mount -xdev -noleaf -daystart \
    -ignore_readdir_race -noignore_readdir_race -help -version";

/// `find [-H|-L|-P] [START...] [EXPRESSION]`: starting points run up to the first word that
/// begins an expression; with none, find walks `.` implicitly.
fn find(args: &[String]) -> Option<Vec<String>> {
    let globals = args
        .iter()
        .take_while(|w| matches!(w.as_str(), "-H" | "-P"));
    let args = &args[globals.count()..];
    let starts_expression =
        |w: &String| w.starts_with('-') || matches!(w.as_str(), "(" | "!" | ")" | ",");
    let start_count = args.iter().take_while(|w| !starts_expression(w)).count();
    let mut paths = args[..start_count].to_vec();
    let mut expression = args[start_count..].iter();
    while let Some(word) = expression.next() {
        match lookup(&[FIND_EXPRESSION], word)? {
            Takes::Nothing => {}
            Takes::PathValue => paths.push(expression.next()?.clone()),
            Takes::Value | Takes::GluedValue | Takes::ValueUnlessLast => {
                expression.next()?;
            }
        }
    }
    Some(paths)
}

// git: exact long names only (git also accepts abbreviations; refusing them is the safe side),
// and log/diff long values glued (`--format=%H`), as revision parsing accepts them.
// Never --output (writes), --ext-diff/--textconv (run configured programs), --no-index
// (compares any files), --show-signature (runs gpg).
const GIT_STATUS: &str = "-s -b -v -z -u? --short --branch --long --verbose --porcelain? \
    --untracked-files? --ignored? --ahead-behind --no-ahead-behind --show-stash --column? \
    --no-column --renames --no-renames --find-renames? --ignore-submodules?";
const GIT_DIFF_FORMAT: &str = "-p -u -s -z -w -b -a -R -W -D -M? -C? -B? -U? -S: -G: \
    --patch --no-patch --raw --stat? --numstat --shortstat --dirstat? --summary --name-only \
    --name-status --patch-with-stat --patch-with-raw --color? --no-color --word-diff? \
    --color-words? --color-moved? --no-color-moved --unified? --find-renames? \
    --find-copies? --find-copies-harder --break-rewrites? --no-renames \
    --irreversible-delete --relative? --no-relative --text --ignore-space-change \
    --ignore-all-space --ignore-space-at-eol --ignore-blank-lines --ignore-cr-at-eol \
    --minimal --patience --histogram --diff-algorithm? --function-context --abbrev? \
    --full-index --binary --no-prefix --src-prefix? --dst-prefix? --no-ext-diff \
    --no-textconv --diff-filter? --pickaxe-all --pickaxe-regex --ignore-submodules? \
    --submodule? --check --exit-code --quiet";
const GIT_LOG: &str = "-c -m -t -g -i -E -F -P -n: --cc --oneline --max-count? --skip? \
    --since? --until? --after? --before? --author? --committer? --grep? \
    --regexp-ignore-case --all-match --invert-grep --all --branches? --tags? --remotes? \
    --graph --decorate? --no-decorate --abbrev-commit --no-abbrev-commit --format? \
    --pretty? --date? --reverse --first-parent --no-merges --merges --follow --left-right \
    --cherry-pick --cherry-mark --topo-order --date-order --author-date-order --boundary \
    --ancestry-path --simplify-by-decoration --source --walk-reflogs --notes? --no-notes \
    --no-walk? --do-walk --use-mailmap --no-mailmap";
const GIT_BLAME: &str = "-b -c -e -f -l -n -p -s -t -w -M? -C? -L: --root --show-stats \
    --porcelain --line-porcelain --incremental --show-name --show-number --show-email \
    --abbrev? --date? --reverse --first-parent --progress --no-progress --score-debug \
    --ignore-rev: --contents@";
const GIT_REV_PARSE: &str = "-q --verify --quiet --short? --abbrev-ref? --symbolic \
    --symbolic-full-name --show-toplevel --show-prefix --show-cdup --git-dir \
    --absolute-git-dir --git-common-dir --is-inside-work-tree --is-inside-git-dir \
    --is-bare-repository --is-shallow-repository --show-superproject-working-tree \
    --show-object-format? --all --branches? --tags? --remotes? --revs-only --no-revs \
    --flags --no-flags --default:";
/// Listing only: nothing here deletes, renames, copies, creates or sets upstreams.
const GIT_BRANCH: &str = "-a -r -v -l -i --all --remotes --verbose --list --ignore-case \
    --show-current --color? --no-color --column? --no-column --abbrev? --no-abbrev \
    --omit-empty --sort: --format: --points-at: --contains~ --no-contains~ --merged~ \
    --no-merged~";

/// `git [-C DIR] [--no-pager|-P|--no-optional-locks] SUBCOMMAND ...`; every other global
/// option (-c, --exec-path, --git-dir, --work-tree, ...) can make git run or read elsewhere.
fn git(args: &[String]) -> Option<Vec<String>> {
    let mut rest = args;
    let mut dir = None;
    loop {
        match rest.first()?.as_str() {
            // Only one -C: a second one is relative to the first, so checking it alone lies.
            "-C" if dir.is_none() => {
                dir = Some(rest.get(1)?);
                rest = &rest[2..];
            }
            "--no-pager" | "-P" | "--no-optional-locks" => rest = &rest[1..],
            _ => break,
        }
    }
    let (subcommand, args) = rest.split_first()?;
    let subcommand = subcommand.as_str();
    // Operands are revisions and pathspecs git resolves inside the repository, except for
    // diff (outside a repository it compares any two files) and blame (its file), kept as paths.
    let (options, operands_are_paths): (&[&str], bool) = match subcommand {
        "--version" | "version" => (&["--build-options"], false),
        "help" => (&[], false),
        "status" => (&[GIT_STATUS], false),
        "log" | "show" => (&[GIT_DIFF_FORMAT, GIT_LOG], false),
        "diff" => (&[GIT_DIFF_FORMAT, "--cached --staged --merge-base"], true),
        "blame" => (&[GIT_BLAME], true),
        "rev-parse" => (&[GIT_REV_PARSE], false),
        "branch" => (&[GIT_BRANCH], false),
        _ => return None,
    };
    let parsed = parse(args, options, matches!(subcommand, "log" | "show"))?;
    // Without --list, `git branch NAME` creates the branch NAME.
    if subcommand == "branch" && !parsed.operands.is_empty() && !parsed.saw(&["-l", "--list"]) {
        return None;
    }
    let mut paths = parsed.option_paths;
    if operands_are_paths {
        paths.extend(parsed.operands);
    }
    let Some(dir) = dir else { return Some(paths) };
    // git changes into DIR first, so relative paths are relative to it.
    let under_dir = paths
        .iter()
        .map(|p| Path::new(dir).join(p).to_string_lossy().into_owned());
    Some(std::iter::once(dir.clone()).chain(under_dir).collect())
}

#[cfg(test)]
mod tests {
    use super::known_safe;

    fn check(command: &str) -> Option<Vec<String>> {
        known_safe(
            &command
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>(),
        )
    }

    /// `cases` is `COMMAND => PATHS...` entries separated by `;`.
    fn assert_safe(cases: &str) {
        for case in cases.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            let (command, paths) = case.split_once("=>").expect("COMMAND => PATHS");
            let expected = paths.split_whitespace().map(String::from).collect();
            assert_eq!(check(command), Some(expected), "{command}");
        }
    }

    /// `commands` is separated by `;`, like a shell list.
    fn assert_refused(commands: &str) {
        for command in commands.split(';').map(str::trim) {
            assert_eq!(check(command), None, "{command}");
        }
    }

    #[test]
    fn file_and_text_utilities_report_what_they_read() {
        assert_safe(
            "pwd =>; pwd -P =>; ls =>; /usr/bin/ls -la src => src; /bin/cat a => a;
            ls -la --color=never -- -weird => -weird; ls --sort time -I target -w80 . => .;
            cat -n a.txt b.txt => a.txt b.txt; wc -lw a => a; ls --help =>;
            head -5 f => f; head -n5 f => f; head -n 5 f => f; head --lines=5 f => f;
            head -n -5 f => f; tail -20 log => log; tail -qn +3 a b => a b;
            stat -c %s f => f; file -m magic.mgc -b x => magic.mgc x; df -h / => /;
            du -sh --max-depth=1 . => .; tree -L 2 -a src => src; nl -ba f => f;
            basename -s .rs /a/b.rs =>; dirname /a/b =>; readlink -f link => link;
            realpath --relative-to=base x => base x; cut -d: -f1 /etc/passwd => /etc/passwd;
            tr -d abc =>; sort -rn -k2 -t, data.csv => data.csv; uniq -c input => input;
            sort --random-source=seed x => seed x; diff -u a b => a b; cmp -s a b => a b;
            diff --exclude=target -X ignore x y => ignore x y; comm -12 a b => a b;
            which -a cargo =>; type -t ls =>; id -un =>; whoami =>; uname -a =>;
            date =>; date +%s =>; date -u -d yesterday +%F =>; date -Iseconds -r file => file;
            hostname =>; hostname -s =>",
        );
    }

    #[test]
    fn search_tools_separate_pattern_from_paths() {
        assert_safe(
            "rg foo =>; rg -i foo src tests => src tests; rg -e foo -e bar src => src;
            rg -f pats.txt src => pats.txt src; rg -if pats.txt src => pats.txt src;
            rg --files src => src; rg -uu -A3 -g *.rs TODO =>; rg --type-list =>;
            rg -tpy -n --json --color never x . => .; rg --ignore-file=.ignore x => .ignore;
            rg -- -foo src => src; grep -rn foo src => src; grep -5 foo a => a;
            grep -e foo -f pats a => pats a; grep --color foo a => a; egrep x a => a;
            grep --include=*.rs -rlC2 x . => .; fgrep -x x =>",
        );
    }

    #[test]
    fn find_reports_starting_points_and_reference_files() {
        assert_safe(
            "find =>; find -name x =>; find . -name *.rs -type f => .;
            find -H a b -maxdepth 2 ( -name x -o -newer ref ) -print0 => a b ref;
            find . ! -path ./target -samefile f -printf %p => . f",
        );
    }

    #[test]
    fn git_read_only_subcommands() {
        assert_safe(
            "git status =>; git status -sb =>; git status --porcelain =>;
            git status --porcelain=v2 -uno =>; git -C repo status => repo;
            git --no-pager log --oneline -n 5 main =>; git log -S needle -c =>;
            git -P --no-optional-locks log -20 --stat -- src =>;
            git log --format=%H --since=2.weeks -pM50% =>; git show HEAD~1 --stat =>;
            git diff --cached -U3 src => src; git -C /r diff a /abs => /r /r/a /abs;
            git blame -L 1,5 --contents buf.rs f.rs => buf.rs f.rs;
            git rev-parse --show-toplevel =>; git rev-parse --abbrev-ref HEAD =>;
            git branch =>; git branch -vv -a =>; git branch --list feat* =>;
            git branch --merged =>; git branch --contains abc123 =>;
            git branch --sort=-committerdate --format %(refname) =>;
            git --version =>; git help log =>",
        );
    }

    #[test]
    fn programs_off_the_list_and_look_alikes_are_refused() {
        assert_refused(
            "; rm -rf x; bash -c ls; sh; python3 x.py; xargs ls; env; env ls; make; npx x;
            sed -n 1p f; sed -i s/a/b/ f; awk {print} f; curl x;
            ./ls; bin/cat f; /tmp/ls; /usr/bin/../../tmp/ls",
        );
    }

    #[test]
    fn writing_following_or_executing_forms_are_refused() {
        assert_refused(
            "tail -f log; tail -F log; tail --follow log; tail -5f log; tail -qf x;
            grep -R x .; grep --dereference-recursive x .; rg -L x; rg --follow x; ls -LR;
            du -L .; tree -l; diff -r a b; find -L . -name x; find . -follow;
            tail --pid=1 x; sort -o f x; sort --output=f x; sort -ro f x; sort -T /tmp x;
            sort --compress-program=gzip x; sort --files0-from=f; sort --out=f x; uniq a b;
            date -s x; date --set=x; date 01011200; date +%s +%F; hostname x; hostname -F f;
            hostname -f; wc --files0-from=f; du --files0-from=f;
            du -X f; tree -o out; tree -R; tree --fromfile f; file -C; file --compile;
            file -z x; file -f list; diff -l a b; diff --paginate a b",
        );
    }

    #[test]
    fn unknown_options_and_malformed_forms_are_refused() {
        assert_refused(
            "ls --bogus; ls -y; ls -a=b; ls --all=x; cat --bogus; head -f x; head -n;
            cut --bogus; stat --bogus; df --sync; which --bogus; id --bogus; uname x; pwd x;
            whoami x; grep --bogus x; grep -rX x; rg --bogus x",
        );
    }

    #[test]
    fn search_helpers_that_run_or_write_are_refused() {
        assert_refused(
            "rg --pre cat x; rg --pre=cat x; rg --pre-glob *.gz x; rg -z x; rg --search-zip x;
            rg -iz x; rg --hostname-bin h x; rg -f=secret x; find . -exec rm {} +;
            find . -execdir ls +; find . -ok rm {} +; find . -okdir x +; find . -delete;
            find . -fprint out; find . -fprint0 out; find . -fprintf out %p; find . -fls out;
            find . -name; find . -bogus; find . ( -name x -o -exec rm {} + )",
        );
    }

    #[test]
    fn git_forms_that_write_or_run_are_refused() {
        assert_refused(
            "git; git -C; git -C a -C b status; git -c core.pager=x log; git -p log;
            git --exec-path=/x log; git --git-dir=x log; git --work-tree=x status;
            git log --output=f; git log --output f; git log --show-signature;
            git show --output=f; git diff --ext-diff; git diff --textconv;
            git diff --no-index a b; git branch newname; git branch -D x; git branch -d x;
            git branch --delete x; git branch -m a b; git branch -c a; git branch -f x;
            git branch -u o/x; git branch --set-upstream-to=o/x; git branch -a newname;
            git branch --contains abc newname; git push; git commit -m x; git checkout x;
            git stash; git rev-parse --parseopt; git rev-parse --sq-quote x; git help -w log;
            git status --bogus; git blame -S revs f",
        );
    }
}
