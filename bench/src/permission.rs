//! The permission engine's cost: a 10-rule policy against a compound command line, analysed in
//! a shell parser worker and judged as the pipeline does it, per call in microseconds (median
//! and IQR over rounds).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use serde_json::json;
use std::sync::Arc;

use toold::permission::facts::{AnalysedLine, command_facts};
use toold::permission::{CallFacts, Decision, HookVerdict, Policy, SessionFacts, evaluate};
use toold::shell::isolated::{DEFAULT_DEADLINE, ShellParser};
use toold::{Env, shell};
use toold_protocol::{Rules, Safety, SessionMode};

use crate::report::Section;
use crate::stats::Samples;

/// A compound line with a pipeline, a list, a wrapper, a redirection and a substitution.
const LINE: &str = "cd src && FOO=1 timeout 30 cargo test -p toold 2>&1 | tee ../test.log; git status --short || echo \"$(date) failed\" > /dev/null";

/// Evaluations per round: enough that the clock's resolution does not matter.
const PER_ROUND: u32 = 2_000;

pub fn permission_section(rounds: usize) -> anyhow::Result<Section> {
    let cwd = Path::new("/work/project");
    let strings = |list: &[&str]| list.iter().map(|rule| rule.to_string()).collect();
    let rules = Rules {
        allow: strings(&[
            "run_command(cargo test *)",
            "run_command(git status *)",
            "run_command(echo *)",
            "run_command(cd *)",
            "run_command(tee *)",
        ]),
        ask: strings(&["run_command(git push *)", "run_command(curl *)"]),
        deny: strings(&[
            "run_command(rm -rf *)",
            "run_command(sudo *)",
            "read_file(.env)",
        ]),
    };
    let policy = Policy::compile([&rules], cwd, Path::new("/home/user"))?;
    let env = Env::new(cwd);
    let arguments = json!({ "command": LINE })
        .as_object()
        .cloned()
        .unwrap_or_default();
    let session = SessionFacts {
        mode: SessionMode::Default,
        policy: &policy,
        grants: &[],
        confined: false,
    };

    let judge = |facts_parsed: &toold::permission::CommandFacts| {
        let call = CallFacts {
            tool: "run_command",
            safety: Safety::SideEffect,
            system: false,
            arguments: &arguments,
            paths: &[],
            command: Some(facts_parsed),
            hook: HookVerdict::Silent,
        };
        evaluate(&call, &session).decision
    };
    let parsed = command_facts(
        "run_command",
        &arguments,
        &env,
        Some(&AnalysedLine::here(LINE)),
    )
    .ok_or_else(|| anyhow::anyhow!("no command facts"))?;
    let decision = match judge(&parsed) {
        Decision::Allow => "allow".to_owned(),
        Decision::Ask { reason, .. } => format!("ask, \"{reason}\""),
        Decision::Deny(reason) => format!("deny, \"{reason}\""),
        Decision::NotAllowed(reason) => format!("not allowed, \"{reason}\""),
    };
    // The daemon's own path: the line goes to a worker process (the release `toold`) and back.
    let parser = ShellParser::new(crate::daemon::release_toold()?, DEFAULT_DEADLINE);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let in_worker = runtime.block_on(parser.analyze("bench", LINE));
    anyhow::ensure!(
        in_worker == *parsed.analysis,
        "the worker's analysis differs from the in-process one"
    );

    let (mut full, mut evaluate_only, mut parse_only, mut worker_only) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    for _ in 0..rounds {
        let started = Instant::now();
        runtime.block_on(async {
            for _ in 0..PER_ROUND {
                let analysed = AnalysedLine {
                    line: LINE.to_owned(),
                    analysis: Arc::new(parser.analyze("bench", LINE).await),
                };
                let facts = command_facts("run_command", &arguments, &env, Some(&analysed))
                    .ok_or_else(|| anyhow::anyhow!("no command facts"))?;
                std::hint::black_box(judge(&facts));
            }
            anyhow::Ok(())
        })?;
        full.push(started.elapsed() / PER_ROUND);
        let started = Instant::now();
        runtime.block_on(async {
            for _ in 0..PER_ROUND {
                std::hint::black_box(parser.analyze("bench", std::hint::black_box(LINE)).await);
            }
        });
        worker_only.push(started.elapsed() / PER_ROUND);
        let started = Instant::now();
        for _ in 0..PER_ROUND {
            std::hint::black_box(judge(std::hint::black_box(&parsed)));
        }
        evaluate_only.push(started.elapsed() / PER_ROUND);
        let started = Instant::now();
        for _ in 0..PER_ROUND {
            std::hint::black_box(shell::analyze(std::hint::black_box(LINE)));
        }
        parse_only.push(started.elapsed() / PER_ROUND);
    }
    let mut markdown = String::from("## The permission engine\n\n");
    let _ = write!(
        markdown,
        "A 10-rule policy (5 allow, 2 ask, 3 deny) against `{LINE}` (decided: {decision}), per \
         call ({PER_ROUND} calls a round, {rounds} rounds):\n\n\
         | step | µs per call, median (IQR) |\n|---|---|\n"
    );
    for (name, samples) in [
        ("analyse in a worker + judge (what a call pays)", &full),
        ("analyse in a worker (round trip)", &worker_only),
        ("parse only, in-process", &parse_only),
        ("judge only", &evaluate_only),
    ] {
        let summary = samples.summary();
        let _ = writeln!(
            markdown,
            "| {name} | {:.1} ({:.1}) |",
            summary.median * 1e3,
            summary.iqr() * 1e3
        );
    }
    markdown.push_str(
        "\nThe daemon analyses lines in a parser worker process (`shell::isolated`), which it can \
         kill when a line takes too long; the round trip is the price of that boundary. \
         brush-parser caches the parse of recent words, as it would for a model repeating \
         similar lines.\n",
    );
    unasked_decisions(rounds, &mut markdown)?;
    Ok(Section {
        figures: Vec::new(),
        markdown,
    })
}

/// What deciding an unasked command costs, in-process (the parse excluded): gathering its facts
/// (the known-safe list and the paths it reads resolved, the escalation read) and judging it,
/// with no rule, for `true` in a session whose sandbox confines it (`sandboxed`) and for
/// `ls -la src` where the sandbox does not decide (`known_safe`).
fn unasked_decisions(rounds: usize, markdown: &mut String) -> anyhow::Result<()> {
    let project = tempfile::tempdir()?;
    let cwd = project.path().canonicalize()?;
    std::fs::create_dir(cwd.join("src"))?;
    let policy = Policy::default();
    let env = Env::new(&cwd);
    let _ = writeln!(
        markdown,
        "
An unasked command's decision, no rule, in-process (the line's facts gathered, the \
         known-safe list and the paths it names resolved, then judged; the parse excluded), per \
         call ({PER_ROUND} calls a round, {rounds} rounds):\n\n\
         | line | decided by | µs per call, median (IQR) |\n|---|---|---|"
    );
    for (line, confined) in [("true", true), ("ls -la src", false)] {
        let arguments = json!({ "command": line })
            .as_object()
            .cloned()
            .unwrap_or_default();
        let analysed = AnalysedLine::here(line);
        let session = SessionFacts {
            mode: SessionMode::Default,
            policy: &policy,
            grants: &[],
            confined,
        };
        let decide = || {
            let facts = command_facts("run_command", &arguments, &env, Some(&analysed))?;
            let call = CallFacts {
                tool: "run_command",
                safety: Safety::SideEffect,
                system: false,
                arguments: &arguments,
                paths: &[],
                command: Some(&facts),
                hook: HookVerdict::Silent,
            };
            Some(evaluate(&call, &session).step)
        };
        let step = decide().ok_or_else(|| anyhow::anyhow!("no command facts"))?;
        let mut samples = Samples::default();
        for _ in 0..rounds {
            let started = Instant::now();
            for _ in 0..PER_ROUND {
                std::hint::black_box(decide());
            }
            samples.push(started.elapsed() / PER_ROUND);
        }
        let summary = samples.summary();
        let _ = writeln!(
            markdown,
            "| `{line}` | `{}` | {:.1} ({:.1}) |",
            step.as_str(),
            summary.median * 1e3,
            summary.iqr() * 1e3
        );
    }
    Ok(())
}
