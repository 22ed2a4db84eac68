//! The panic hook of the targets that reach the shell parser: brush-parser panics on some input
//! (fuzzing found a few), and toold catches each such panic and makes the line unreadable.
//! libFuzzer's own hook aborts on every panic, caught or not; this one lets brush-parser's pass
//! to toold's `catch_unwind` and keeps aborting on every other panic. A brush-parser panic that
//! toold did not catch still ends the run: libfuzzer-sys aborts on any panic that leaves a
//! target.

use std::sync::Once;

pub fn leave_parser_panics_to_toold() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_parser = info
                .location()
                .is_some_and(|location| location.file().contains("brush-parser"));
            if !in_parser {
                abort(info);
            }
        }));
    });
}
