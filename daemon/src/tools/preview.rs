//! What a file tool's call would change, as an approval request shows it (`preview`): the
//! unified diff of the file as it is now against the text the tool would write, that text made
//! by the tool's own code (`edit_file::edited`, `write_file`'s content), so that what is
//! approved is what the call writes when nothing changes the file meanwhile.

use similar::TextDiff;
use toold_protocol::{PREVIEW_MAX_BYTES, Preview};

use super::ToolFailure;
use super::read_file::read_text;
use crate::paths::ResolvedPath;

/// How long a diff may take before it settles for a coarser one: a diff of two large texts
/// that share no line is quadratic.
const DIFF_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The header a new file's diff starts from.
pub(crate) const NO_FILE: &str = "/dev/null";

/// The unified diff (3 lines of context) of `before` and `after`, under the two headers; the
/// one diff both `edit_file`'s result and an approval's preview are made with.
pub(crate) fn unified_diff(
    before: &str,
    after: &str,
    old_header: &str,
    new_header: &str,
) -> String {
    TextDiff::configure()
        .timeout(DIFF_TIME_LIMIT)
        .diff_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(old_header, new_header)
        .to_string()
}

/// `diff` cut to at most `max_bytes`, after a whole line, with a last line saying how much was
/// left out and `then` (what to do to see it); and how many bytes that was (0 when nothing was
/// cut).
pub(crate) fn cut_at_line(mut diff: String, max_bytes: usize, then: &str) -> (String, usize) {
    let (kept, cut) = whole_lines(&diff, max_bytes);
    if cut == 0 {
        return (diff, 0);
    }
    diff.truncate(kept.len());
    diff.push_str(&format!("[… {cut} more bytes of the diff cut{then}]\n"));
    (diff, cut)
}

/// The longest start of `text` of at most `max_bytes` that ends after a whole line (all of it
/// when it fits), and how many bytes are left out: a cut that never splits a line or a
/// character.
pub fn whole_lines(text: &str, max_bytes: usize) -> (&str, usize) {
    if text.len() <= max_bytes {
        return (text, 0);
    }
    let end = text.as_bytes()[..max_bytes]
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |newline| newline + 1);
    (&text[..end], text.len() - end)
}

/// The preview of writing `after` to `target`: its current text diffed against `after`, or a
/// new file's whole content (`before` is `None`).
pub(crate) fn diff_preview(target: &ResolvedPath, before: Option<&str>, after: &str) -> Preview {
    let shown = target.lexical.display().to_string();
    let diff = match before {
        Some(before) => unified_diff(before, after, &shown, &shown),
        None => unified_diff("", after, NO_FILE, &shown),
    };
    let (diff, cut) = cut_at_line(diff, PREVIEW_MAX_BYTES, "");
    Preview::Diff {
        path: shown,
        diff,
        cut_bytes: cut as u64,
    }
}

/// The preview of a change that cannot be computed: why, in one line.
pub(crate) fn unavailable(target: &ResolvedPath, failure: &ToolFailure) -> Preview {
    Preview::Unavailable {
        path: target.lexical.display().to_string(),
        reason: failure.message.replace('\n', " "),
    }
}

/// The text of `target` as it is now, for a preview; `None` when there is no file.
pub(crate) fn current_text(target: &ResolvedPath) -> Result<Option<String>, ToolFailure> {
    match std::fs::symlink_metadata(&target.resolved) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read_text(&target.resolved).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_diff_is_cut_after_a_whole_line() {
        let diff = "-a\n+b\n-c\n+d\n".to_owned();
        assert_eq!(cut_at_line(diff.clone(), 100, ""), (diff.clone(), 0));
        assert_eq!(cut_at_line(diff.clone(), 12, ""), (diff.clone(), 0));
        let (cut, left_out) = cut_at_line(diff.clone(), 7, "; read the file");
        assert_eq!(left_out, 6);
        assert_eq!(
            cut,
            "-a\n+b\n[… 6 more bytes of the diff cut; read the file]\n"
        );
        // A first line longer than the budget: nothing of it is kept.
        let (cut, left_out) = cut_at_line(diff, 2, "");
        assert_eq!(
            (cut.as_str(), left_out),
            ("[… 12 more bytes of the diff cut]\n", 12)
        );
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let diff = "+é\n+ééé\n".to_owned();
        let (cut, left_out) = cut_at_line(diff, 6, "");
        assert_eq!(
            (cut.as_str(), left_out),
            ("+é\n[… 8 more bytes of the diff cut]\n", 8)
        );
    }

    #[test]
    fn a_new_file_is_all_additions_against_dev_null() {
        let target = crate::paths::resolve("new.txt", std::path::Path::new("/w"), &[]);
        let Preview::Diff {
            path,
            diff,
            cut_bytes,
        } = diff_preview(&target, None, "a\nb\n")
        else {
            panic!("a diff");
        };
        assert_eq!((path.as_str(), cut_bytes), ("/w/new.txt", 0));
        assert_eq!(
            diff,
            "--- /dev/null\n+++ /w/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
    }

    #[test]
    fn a_diff_over_the_cap_is_cut_and_says_so() {
        let target = crate::paths::resolve("big.txt", std::path::Path::new("/w"), &[]);
        let after = "0123456789abcdef\n".repeat(2 * PREVIEW_MAX_BYTES / 17);
        let Preview::Diff {
            diff, cut_bytes, ..
        } = diff_preview(&target, None, &after)
        else {
            panic!("a diff");
        };
        let full = unified_diff("", &after, NO_FILE, "/w/big.txt");
        assert!(cut_bytes > 0);
        assert_eq!(
            diff.len() - diff.lines().last().unwrap().len() - 1 + cut_bytes as usize,
            full.len()
        );
        assert!(full.starts_with(&diff[..diff.len() - diff.lines().last().unwrap().len() - 1]));
        assert!(diff.ends_with(&format!("[… {cut_bytes} more bytes of the diff cut]\n")));
    }
}
