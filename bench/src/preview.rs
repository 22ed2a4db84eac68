//! What an approval's preview costs (docs/protocol.md section 7, `preview`): the tools' own
//! preview functions, called directly on a 1 MB file (read, new text made, diffed, cut at
//! 64 KiB), per preview in milliseconds (median and IQR over rounds), beside reading the file
//! alone. The target: an edit's preview in a 1 MB file at most 20 ms.

use std::fmt::Write as _;
use std::time::Instant;

use serde_json::{Map, Value, json};
use toold::Env;
use toold::tools::Tool;
use toold::tools::edit_file::EditFile;
use toold::tools::write_file::WriteFile;
use toold_protocol::Preview;

use crate::report::Section;
use crate::stats::Samples;

/// Previews per round: a few, so that one round is well above the clock's resolution.
const PER_ROUND: u32 = 5;

/// The file previewed: 22,000 numbered lines of 48 bytes, just over 1 MiB (0.2 MB with `--quick`).
fn file_text(quick: bool) -> String {
    let lines = if quick { 4_000 } else { 22_000 };
    (0..lines)
        .map(|n| format!("line {n:06}: the quick brown fox jumps over it.\n"))
        .collect()
}

pub fn preview_section(settings: &crate::Settings) -> anyhow::Result<Section> {
    let rounds = settings.rounds;
    let dir = tempfile::tempdir()?;
    let cwd = dir.path().canonicalize()?;
    let text = file_text(settings.quick);
    let middle = text.lines().count() / 2;
    let path = cwd.join("big.txt");
    std::fs::write(&path, &text)?;
    let path_text = path.display().to_string();
    let env = Env::new(&cwd);
    let object =
        |value: Value| -> Map<String, Value> { value.as_object().cloned().unwrap_or_default() };
    let one_line = object(json!({"path": path_text,
        "old_string": format!("line {middle:06}: the quick"),
        "new_string": format!("line {middle:06}: the slow")}));
    let every_hundredth = object(json!({"path": path_text,
        "old_string": "00: the quick", "new_string": "00: the slow", "replace_all": true}));
    let new_file = object(json!({"path": cwd.join("new.txt").display().to_string(),
        "content": text}));
    // Checked once before anything is timed: each is the diff it should be.
    let check = |preview: Option<Preview>, cut: bool| match preview {
        Some(Preview::Diff { cut_bytes, .. }) if (cut_bytes > 0) == cut => Ok(()),
        other => Err(anyhow::anyhow!("an unexpected preview: {other:?}")),
    };
    check(EditFile.preview(&one_line, &[], &env), false)?;
    check(
        EditFile.preview(&every_hundredth, &[], &env),
        !settings.quick,
    )?;
    check(WriteFile.preview(&new_file, &[], &env), true)?;

    let mut samples = [
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    ];
    for _ in 0..rounds {
        let timed = |work: &dyn Fn()| {
            let started = Instant::now();
            for _ in 0..PER_ROUND {
                work();
            }
            started.elapsed() / PER_ROUND
        };
        samples[0].push(timed(&|| {
            std::hint::black_box(EditFile.preview(&one_line, &[], &env));
        }));
        samples[1].push(timed(&|| {
            std::hint::black_box(EditFile.preview(&every_hundredth, &[], &env));
        }));
        samples[2].push(timed(&|| {
            std::hint::black_box(WriteFile.preview(&new_file, &[], &env));
        }));
        samples[3].push(timed(&|| {
            std::hint::black_box(std::fs::read_to_string(&path).ok());
        }));
    }
    let mut markdown = String::from("## An approval's preview\n\n");
    let _ = write!(
        markdown,
        "The preview functions of `edit_file` and `write_file` (what the pipeline runs off the \
         async threads before it sends `approval/request`), called directly on a file of {} \
         bytes ({} lines), the file in the page cache; per preview ({PER_ROUND} a round, \
         {rounds} rounds). Target: an edit's preview in a 1 MB file at most 20 ms.\n\n\
         | preview | ms per preview, median (IQR) |\n|---|---|\n",
        text.len(),
        text.lines().count()
    );
    for (name, samples) in [
        ("`edit_file`, one line in the middle changed", &samples[0]),
        (
            "`edit_file`, `replace_all` on every 100th line (diff over 64 KiB at 1 MiB, cut)",
            &samples[1],
        ),
        (
            "`write_file` of the same text as a new file (all `+`, cut at 64 KiB)",
            &samples[2],
        ),
        ("reading the file alone (the floor)", &samples[3]),
    ] {
        let _ = writeln!(markdown, "| {name} | {} |", samples.summary().cell());
    }
    markdown.push_str(
        "\nAn edit's preview reads the file, makes the new text with the code the tool writes \
         it with, and diffs the two line by line (`similar`, 3 lines of context, which first \
         sets aside the lines both share at the start and the end); the cut at 64 KiB bounds \
         what the request carries, not what is diffed.\n",
    );
    Ok(Section {
        figures: Vec::new(),
        markdown,
    })
}
