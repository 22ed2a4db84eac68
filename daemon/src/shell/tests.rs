//! Tests of the command-line analysis: the forms rules match, and what makes a line opaque.

use super::guards::{MAX_HERE_DOCUMENTS, MAX_LINE_BYTES, substitutions_in};
use super::*;

fn forms(line: &str) -> Vec<Vec<String>> {
    analyze(line)
        .commands
        .into_iter()
        .map(|command| command.match_forms)
        .collect()
}

fn allow_forms(line: &str) -> Vec<Vec<String>> {
    analyze(line)
        .commands
        .into_iter()
        .map(|command| command.allow_forms)
        .collect()
}

#[test]
fn simple_lines_split_into_their_commands() {
    let analysis = analyze("git status && cargo test -p x; ls | wc -l");
    assert!(analysis.opaque.is_empty(), "{:?}", analysis.opaque);
    let allow: Vec<String> = analysis
        .commands
        .iter()
        .map(|c| c.allow_forms[0].clone())
        .collect();
    assert_eq!(allow, ["git status", "cargo test -p x", "ls", "wc -l"]);
}

#[test]
fn quotes_and_escapes_are_removed() {
    assert_eq!(forms("\"rm\" x")[0][0], "rm x");
    assert_eq!(forms("\\rm x")[0][0], "rm x");
    assert_eq!(forms("r'm' 'a b'")[0][0], "rm a b");
}

#[test]
fn paths_wrappers_and_assignments_reach_the_real_command() {
    assert!(forms("/usr/bin/rm -rf x")[0].contains(&"rm -rf x".to_owned()));
    assert!(forms("FOO=1 rm x")[0].contains(&"rm x".to_owned()));
    assert!(forms("timeout -s KILL 5 nice -n 3 rm x")[0].contains(&"rm x".to_owned()));
    assert!(forms("env -i A=1 rm x")[0].contains(&"rm x".to_owned()));
    assert!(forms("xargs -0 -n 1 rm < list")[0].contains(&"rm".to_owned()));
    assert_eq!(allow_forms("timeout 5 cargo test"), [["cargo test"]]);
    assert_eq!(
        allow_forms("PATH=/tmp/x git status"),
        [["PATH=/tmp/x git status"]]
    );
    assert_eq!(
        allow_forms("env PATH=/tmp/x git status"),
        [["PATH=/tmp/x git status"]]
    );
    assert_eq!(
        allow_forms("sudo git status"),
        [["git status", "sudo git status"]]
    );
}

#[test]
fn nested_lines_are_found_and_make_the_line_opaque() {
    for line in [
        "echo $(rm x)",
        "echo `rm x`",
        "bash -c 'rm x'",
        "sh -ec \"rm x\"",
        "eval rm x",
        "cat <(rm x)",
    ] {
        let analysis = analyze(line);
        assert!(!analysis.opaque.is_empty(), "{line}");
        assert!(
            analysis
                .commands
                .iter()
                .any(|c| c.nested && c.match_forms.contains(&"rm x".to_owned())),
            "{line}: {:?}",
            analysis.commands
        );
    }
    let find = analyze("find . -name '*.o' -exec rm {} ;");
    assert!(
        find.commands.iter().any(|c| c.allow_forms == ["rm {}"]),
        "{:?}",
        find.commands
    );
}

#[test]
fn arithmetic_and_computed_names_are_opaque() {
    assert!(!analyze("echo $[ x='a[$(touch F)]', x ]").opaque.is_empty());
    assert!(!analyze("echo $((x))").opaque.is_empty());
    assert!(analyze("echo $((1 + 2))").opaque.is_empty());
    assert!(!analyze("$CMD x").opaque.is_empty());
    assert!(!analyze("r* x").opaque.is_empty());
    assert!(!analyze("[[ $x -eq 1 ]]").opaque.is_empty());
}

#[test]
fn redirections_that_write_are_collected() {
    let analysis =
        analyze("echo x > ~/.bashrc 2>/dev/null; cat < in >> out.txt; echo &> all.log; echo >&2");
    assert_eq!(analysis.written_paths, ["~/.bashrc", "out.txt", "all.log"]);
    assert!(analysis.opaque.is_empty(), "{:?}", analysis.opaque);
    assert!(!analyze("echo x > \"$HOME/x\"").opaque.is_empty());
}

#[test]
fn a_bare_assignment_is_a_command_for_allow_rules() {
    assert_eq!(
        allow_forms("PATH=/tmp/x; git status"),
        [["PATH=/tmp/x"], ["git status"]]
    );
}

#[test]
fn unparseable_lines_are_opaque() {
    assert!(!analyze("echo 'unterminated").opaque.is_empty());
    assert!(!analyze("if then fi (((").opaque.is_empty());
}

/// Analyses a line, failing the test if that takes 2 s or more.
fn analyze_quickly(line: &str) -> CommandLine {
    let started = std::time::Instant::now();
    let analysis = analyze(line);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{line:?} took {:?}",
        started.elapsed()
    );
    analysis
}

/// Inputs found by fuzzing on which brush-parser panics, takes exponential time or unbounded
/// memory: each is unreadable (so the engine asks), at once.
#[test]
fn lines_the_parser_cannot_take_are_unreadable_at_once() {
    let nested = format!("{}\n\n))", "(".repeat(32));
    let lines = [
        "i 333733333333>>".to_owned(),
        "g\0\0i6t=g\0\0i6t=@ <<qt$[ <<e-tf ".to_owned(),
        "g <<qt$[ <<e-tf ".to_owned(),
        "g <<qt$( <<e-tf ".to_owned(),
        "g <<qt$(( <<e-tf ".to_owned(),
        "g << `x <<e ".to_owned(),
        nested,
        format!("echo {}", "$(".repeat(20) + &")".repeat(20)),
        "x".repeat(MAX_LINE_BYTES + 1),
        "cat <<a ".repeat(MAX_HERE_DOCUMENTS + 1),
        "\n336\ni>&n<25<<\"\"&& #".to_owned(),
        "cat <<\"\" | wc #".to_owned(),
        "i<<-'' #".to_owned(),
        "i<< \"\"'' a #".to_owned(),
        "sh -c 'i<<\"\" #'".to_owned(),
        format!("8 ~-{}&&$ n", "8".repeat(30)),
        format!("ls ~+{}", "9".repeat(25)),
        format!("e>t >|<<\r Xc6vv{}0&&\t", "P".repeat(23)),
        "e <<\r X&&\t".to_owned(),
        "[     $$(r             s <<-  e ".to_owned(),
        "ec=(cho $(8````28<-          s <<-  e <<-  8887.78854 $2 n)) ".to_owned(),
        "echo $(as$chpo  4( 1) echo $'\\x30'<<  \"a\"[\"'x\"h4)o ! git sb\"echo $'\\x30' \") "
            .to_owned(),
        "cat <<EOF\nno end".to_owned(),
        "e&hf\"\"\"\"\"\"\"\t\t\"<<<<<\t\t\"\"\"\"\t\t\t".to_owned(),
        "[        $$(r                \"x                \"x   <<-    #s <<-  eo".to_owned(),
        "d?(,${n[,${n[\"${eggcU$K_>${n[,${n[\"${eggcU$K_\u{5}\nkz)?c\u{51a}".to_owned(),
        "mw?(PA\"$[8v~4=*\"[\"PP@d[${P0[0P$\"P${!eed[${P0[0P$\"P${!eeH).-".to_owned(),
        "${n[${n[${n[${n[${n[${n[1]}]}]}]}]}]}".to_owned(),
        "cOF\n$(<<c\"\nAAAAAAAAAAA\x0e$\n\x0e$[\"\"]\"_$(".to_owned(),
        "$(<<c\"\n$[\"\"]\"_$(".to_owned(),
    ];
    for line in &lines {
        let analysis = analyze_quickly(line);
        assert!(analysis.unreadable.is_some(), "{line:?}: {analysis:?}");
        assert!(
            !analysis.opaque.is_empty(),
            "an unreadable line is opaque too"
        );
    }
    // The slowest shapes known, as deep as the guard lets them be, still parse quickly.
    for line in [
        "${n[${n[${n[${n[",
        "${n[a${n[a${n[a${n[a",
        "echo ${n[${n[${n[${n[1]}]}]}]}",
        "((((((((\n\n))",
        "?(\"$[\"[d[${P0[${!e[${P0[",
    ] {
        analyze_quickly(line);
    }
    // Real lines stay readable: brackets eight deep, a few here-documents.
    for line in [
        "if [ -f a ]; then (cd x && (make || (echo failed; exit 1))); fi",
        "cat <<EOF\nhello\nEOF",
        "echo ${HOME} $((1 + (2 * (3 + 4))))",
        "grep -c x <<< \"$output\"",
        "cat <<-'EOF'\n\tbody $x\nEOF",
        "cat <<\"END OF TEXT\"\nbody\nEND OF TEXT",
        "cat <<'x'>out\nbody\nx",
        "cat <<E\\OF\nbody\nEOF",
        "x=$(cat <<A <<-B\na\nA\n\tb\n\tB\n)",
        "cat <<EOF > out.txt; echo done\nline\nEOF\necho after",
        r#"kubectl patch deploy x -p '{"spec":{"template":{"spec":{"containers":[{"name":"x","resources":{"limits":{"cpu":"1"}}}]}}}}'"#,
    ] {
        assert_eq!(analyze(line).unreadable, None, "{line:?}");
    }
}

/// bash's own quoting marks (0x01, 0x7f) in the input change words unlike the parser reads
/// them: a word of 0x7f alone is the empty string to bash. Found by fuzzing, as a write bash
/// tried (`openat("")`) that the analysis named otherwise.
#[test]
fn bash_quoting_marks_in_a_line_are_unreadable() {
    for line in [
        "echo hi >>.tot \u{7f}>& \u{7f}>&1",
        "echo hi > \u{7f}",
        "echo hi > '\u{7f}'",
        "r\u{7f}m -rf x",
        "echo hi > a\u{1}b",
    ] {
        let analysis = analyze(line);
        assert!(analysis.unreadable.is_some(), "{line:?}: {analysis:?}");
    }
}

/// brush-parser keeps a process substitution inside a parameter expansion as plain text, but
/// bash runs it (`echo ${x:-<(touch f)}` runs `touch f`; found by fuzzing): such a line is
/// unreadable, so no allow rule covers it and deny rules are not trusted to have seen inside.
#[test]
fn a_process_substitution_inside_a_parameter_expansion_is_unreadable() {
    for line in [
        "echo ${x:-<(touch f)}",
        "echo ${x:: -=(<(touch f))}",
        "echo \"${x:+>(rm -rf y)}\"",
    ] {
        let analysis = analyze(line);
        assert!(analysis.unreadable.is_some(), "{line:?}: {analysis:?}");
    }
    // A process substitution the parser does see stays readable (and nested).
    let real = analyze("diff <(ls a) <(ls b)");
    assert_eq!(real.unreadable, None);
    assert!(real.commands.iter().any(|command| command.nested));
}

/// brush-parser has read substitutions as plain text (found by fuzzing: `$(cho $((0 ? 2) 2))`
/// came back as the text `$`, the text `(cho ` and an arithmetic expansion), and `$((` whose
/// parentheses do not balance is a subshell to bash (`$((1>/2) )` runs `1` and writes `/2`).
/// A line holding a substitution the analysis did not see, or such an arithmetic expression,
/// is unreadable; where the parser reads the subshell itself, the line is opaque. Either way no
/// allow rule covers it.
#[test]
fn substitutions_the_parser_misses_make_the_line_unreadable() {
    for line in [
        "echo $(cho $((0 ? 2) 2)) ",
        "echo $(touch /tmp/x $((0 ? 2) 2))",
        "((1>/2) )",
        "echo $( ((1>/2) ) )",
        "echo $(cho $((0 ? 2) 2)); sh -c 'echo $(x) $(y)'",
    ] {
        let analysis = analyze(line);
        assert!(analysis.unreadable.is_some(), "{line:?}: {analysis:?}");
    }
    for line in [
        "echo $((1>/2) )",
        "echo $((1>~/2)2)",
        "echo \"$((1>/2) )\"",
        "echo $((0 ? 2) 2)",
    ] {
        let analysis = analyze(line);
        assert!(!analysis.opaque.is_empty(), "{line:?}: {analysis:?}");
    }
    // Substitutions the parser does see, arithmetic that closes, and text bash never runs stay
    // readable.
    for line in [
        "echo $(date) `whoami` \"$(pwd)\"",
        "diff <(ls a) <(ls b)",
        "echo $((1 + (2 * 3))) $(( $(echo 1) + 2 ))",
        "git commit -m 'fix `x` and $(y)'",
        "echo $'a $(b) \\' `c`'",
        "git status # see $(x) and `y`",
        "echo $$ ${x:-$(pwd)}",
        "cat <<EOF\n$(date)\nEOF",
        "for ((i = 0; i < 3; i++)); do echo $i; done; (( i > 2 )) && ((j++))",
        "sh -c 'echo $(date)'",
    ] {
        assert_eq!(analyze(line).unreadable, None, "{line:?}");
    }
    // Rough in the safe direction: quotes in a line with a here-document do not count.
    assert!(analyze("cat <<'EOF'\n$(date)\nEOF").unreadable.is_some());
}

#[test]
fn the_substitution_count_follows_quotes_comments_and_arithmetic() {
    for (line, expected) in [
        ("echo $(a) `b` <(c) >(d)", 4),
        ("echo '$(a)' \"$(b)\" $'`c`' \\$(d)", 1),
        ("echo $((1 + 2)) $(( (1) ))", 0),
        ("echo $((0 ? 2) 2))", 1),
        ("echo \"<(a)\" # $(b)\n$(c)", 1),
        ("echo $$(a)", 0),
        ("echo a#$(b)", 1),
        ("cat <<X\n'\nX\n$(c)", 1),
        ("((1>/2) ); (( x > 1 )); for ((;;)); do :; done", 1),
    ] {
        assert_eq!(substitutions_in(line), expected, "{line:?}");
    }
}

/// Lines bash reads otherwise than a POSIX shell: analysed as bash runs them (`run_command`
/// runs bash), so `$'…'`, `[[ … ]]` and `(( … ))` hide no command and no redirection.
#[test]
fn lines_are_read_as_bash_reads_them() {
    let quoted = analyze("echo $'\\' ; id > P #'");
    assert_eq!(
        allow_forms("echo $'\\' ; id > P #'"),
        [["echo ' ; id > P #"]]
    );
    assert!(quoted.written_paths.is_empty(), "{quoted:?}");
    let test = analyze("echo hi; [[ a > /outside/f ]]");
    assert!(test.written_paths.is_empty(), "{test:?}");
    assert_eq!(allow_forms("echo hi; [[ a > /outside/f ]]"), [["echo hi"]]);
    let arithmetic = analyze("echo hi; ((x>~/9))");
    assert!(arithmetic.written_paths.is_empty(), "{arithmetic:?}");
    assert!(
        !arithmetic.opaque.is_empty(),
        "arithmetic on a variable is opaque"
    );
    // `$'…'` with escapes is decoded for deny rules, and computed for allow rules.
    let decoded = analyze("$'\\x72m' -rf x");
    assert_eq!(decoded.commands[0].match_forms[0], "rm -rf x");
    assert!(!decoded.opaque.is_empty());
}

/// Brace expansion runs other words than the line shows: followed, and opaque for allow rules.
#[test]
fn brace_expansion_is_followed() {
    assert_eq!(forms("{id,}")[0][0], "id");
    assert_eq!(forms("git push {--force,x}")[0][0], "git push --force x");
    assert_eq!(
        forms("echo \"{a,b}\" '{c,d}' \\{e,f}")[0][0],
        "echo {a,b} {c,d} {e,f}"
    );
    assert!(analyze("echo \"{a,b}\"").opaque.is_empty());
    let target = analyze("echo hi > {/tmp/y,}");
    assert_eq!(target.written_paths, ["/tmp/y"]);
    assert!(!target.opaque.is_empty());
    // More than one word is an ambiguous redirection in bash: nothing judged, opaque.
    let ambiguous = analyze("echo hi > {a,b}");
    assert!(ambiguous.written_paths.is_empty());
    assert!(!ambiguous.opaque.is_empty());
    // Bash expands an unquoted glob in a redirection to the one file it matches.
    for line in [
        "echo hi > l*",
        "echo hi >> .git/con?ig",
        "echo hi > [l]ink",
        "cat < secret*",
        "env time -o out* echo",
        "env time -o 'out*' echo",
        "env time -o \"$HOME/x\" echo",
        "env time -o ~/x`id` echo",
    ] {
        assert!(!analyze(line).opaque.is_empty(), "{line}");
    }
    for line in ["echo hi > 'l*'", "echo hi > \"l*\"", "echo hi > l\\*"] {
        assert!(analyze(line).opaque.is_empty(), "{line}");
    }
    let huge = analyze("echo {a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}");
    assert!(huge.unreadable.is_some(), "{huge:?}");
}

/// Bash evaluates some variables' values as code: a subscript in a name it evaluates runs the
/// commands in it (`x='a[$(touch P)]'; echo ${!x}`), and `${x@P}` runs those in the value.
#[test]
fn expansions_that_evaluate_values_as_code_are_opaque() {
    for line in [
        "echo ${!x}",
        "echo ${!x:-y}",
        "echo ${x@P}",
        "echo ${a[i]}",
        "echo ${a[$i]}",
        "echo ${a[i+1]}",
        "echo ${x:BASH_REMATCH}",
        "echo ${x:1:n}",
        "echo \"${x:i}\"",
        "printf -v \"$f\" x",
        "printf -v 'a[$(touch P)]' x",
        "printf -va[1] x",
        "read \"$v\"",
        "read 'a[$(touch P)]'",
        "read -a \"$v\"",
        "mapfile -t \"$v\"",
        "unset 'a[$(touch P)]'",
        "declare \"$n=1\"",
        "export 'a[$(id)]=1'",
        "local -n r=\"$x\"; echo ok",
        "[[ -v 'a[$(touch P)]' ]]",
        "[[ -v $x ]]",
        "[[ -R x[1] ]]",
        "test -v \"$x\"",
        "[ -v 'a[$(touch P)]' ]",
        "let x=y",
        "getopts ab \"$v\"",
        "echo ${CDPATH:=/tmp}",
        "echo ${x=1}",
        "wait -p \"$v\"",
    ] {
        assert!(!analyze(line).opaque.is_empty(), "{line}");
    }
    for line in [
        "echo ${!p*}",
        "echo ${!a[@]}",
        "echo ${x@Q}",
        "echo ${a[1]}",
        "echo ${a[@]}",
        "echo ${x:1:2}",
        "echo ${x: -1}",
        "echo ${x:-default}",
        "printf -v f x",
        "printf '%s' \"$x\"",
        "read x",
        "read -r line",
        "declare x=1",
        "export PATH=$HOME/bin:$PATH",
        "[[ -v x ]]",
        "test -v x",
        "test -n \"$x\"",
        "unset x",
    ] {
        assert!(
            analyze(line).opaque.is_empty(),
            "{line}: {:?}",
            analyze(line)
        );
    }
}

/// A `for` loop assigns its variable: one that bash or a program reads is an assignment that
/// allow rules must cover, as a bare `NAME=value` is.
#[test]
fn loop_variables_others_read_are_assignments() {
    assert_eq!(
        allow_forms("for PATH in /tmp/x; do git status; done"),
        [["PATH=/tmp/x"], ["git status"]]
    );
    assert_eq!(
        allow_forms("for CDPATH in /a /b; do echo; done")[0],
        ["CDPATH=/a; CDPATH=/b"]
    );
    assert_eq!(
        allow_forms("for http_proxy in x; do true; done")[0],
        ["http_proxy=x"]
    );
    assert_eq!(allow_forms("for i in 1 2; do echo $i; done"), [["echo $i"]]);
    assert!(
        analyze("for BASH_CMDS in x; do true; done")
            .unreadable
            .is_some()
    );
    assert_eq!(
        allow_forms("coproc PATH { true; }; git status"),
        [["PATH="], ["true"], ["git status"]]
    );
    // `~` is not the home the engine knows once a loop assigned HOME.
    assert!(
        !analyze("for HOME in /etc; do echo x > ~/f; done")
            .opaque
            .is_empty()
    );
}

/// A command name with blanks in it names one program, though its form reads as several words.
#[test]
fn command_names_with_blanks_are_opaque() {
    for line in [
        "'echo x' y",
        "echo' b'' 9\"c $HOME\" $'\\ox'42' $\"m\"",
        "\"git status\"",
        "env 'echo /x'",
        "echo\\ x",
    ] {
        assert!(!analyze(line).opaque.is_empty(), "{line}");
    }
    assert!(analyze("echo 'x y'").opaque.is_empty());
}

/// brush-parser reads `( (` as arithmetic; bash runs two subshells.
#[test]
fn spaced_nested_subshells_are_unreadable() {
    for line in [
        "echo hi;( (1>~/9))",
        "( (echo>x) )",
        "echo $( (id) )",
        "(\n(true))",
    ] {
        assert!(analyze(line).unreadable.is_some(), "{line}");
    }
    assert!(analyze("(echo x)").unreadable.is_none());
}

/// Bash expands the file name of `>&WORD` twice when it is no descriptor (found by the
/// `bash_differential` fuzz target: `echo>&1\'ech/w` wrote `1ech/w`, not the `1'ech/w` judged).
#[test]
fn a_file_name_after_duplication_is_expanded_twice() {
    for line in [
        "echo hi >&'$(id)'",
        "echo hi >& '$(id)'",
        "echo hi 1>&\"\\$(id)\"",
        "echo hi >&'`id`'",
        "echo hi >&1'$x'",
        "{ echo hi; } >&'$(id)'",
        "exec >&'$(id)'",
        "echo hi >&$x",
        "echo hi >&\"$x\"",
        "echo hi >&l*",
    ] {
        let analysis = analyze(line);
        assert!(analysis.unreadable.is_some(), "{line:?}: {analysis:?}");
    }
    for line in [
        "echo>&1\\'ech/w",
        "echo hi >&'a b'",
        "echo hi >&'~'/x",
        "echo hi >&'x*'",
        "echo hi >&\\{a,b\\}",
    ] {
        let analysis = analyze(line);
        assert!(!analysis.opaque.is_empty(), "{line:?}: {analysis:?}");
        assert!(analysis.written_paths.is_empty(), "{line:?}: {analysis:?}");
    }
    let plain = analyze("echo hi >&out.txt 2>&1 >&2- >&-");
    assert!(plain.opaque.is_empty(), "{plain:?}");
    assert_eq!(plain.written_paths, ["out.txt"]);
}

/// A shell or an interpreter reading its program from its input runs code no rule can look
/// into, unless the input is a here-string or here-document of known shell code, which is
/// walked like `sh -c`'s.
#[test]
fn programs_read_from_the_input_are_hidden_code_unless_their_text_is_known() {
    for line in [
        "echo rm a.txt | bash",
        "sh -s < f",
        "bash /dev/stdin",
        "cat f | sh -s -- x",
        "python3 - <<EOF\nimport os\nEOF",
        "python3 <<< 'import os'",
        "perl < script.pl",
        "node < app.js",
        "bash <<EOF\nrm $target\nEOF",
        "bash <<< \"rm $target\"",
        "source /dev/stdin < f",
        "awk -f - < prog.awk",
        "env -i bash < f",
        "timeout 5 sh",
        "x='rm a'; bash -c \"$x\"",
        "eval \"$(cat f)\"",
    ] {
        let analysis = analyze(line);
        assert!(!analysis.hidden_code.is_empty(), "{line}: {analysis:?}");
        assert!(!analysis.opaque.is_empty(), "{line}");
    }
    for line in [
        "bash <<< 'rm a.txt'",
        "bash <<EOF\nrm a.txt\nEOF",
        "source /dev/stdin <<< 'rm a.txt'",
    ] {
        let analysis = analyze(line);
        assert!(analysis.hidden_code.is_empty(), "{line}: {analysis:?}");
        let forms: Vec<&str> = analysis
            .commands
            .iter()
            .flat_map(|command| command.match_forms.iter().map(String::as_str))
            .collect();
        assert!(forms.contains(&"rm a.txt"), "{line}: {analysis:?}");
    }
    for line in [
        "bash script.sh",
        "python3 test.py",
        "bash -c 'rm a.txt'",
        "cat f | grep x",
    ] {
        assert!(analyze(line).hidden_code.is_empty(), "{line}");
    }
}
