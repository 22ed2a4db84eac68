//! The forms rules match for each simple command found: its words as written, with the
//! program's basename, with the assignments before it and past each wrapper it runs through,
//! and the plain words the known-safe list reads.

use crate::shell::FoundCommand;
use crate::shell::wrappers::{PRIVILEGE_WRAPPERS, unwrap};
use crate::shell::writers;

use super::expansion::{Expanded, has_glob};
use super::nested::shell_quote;
use super::{MAX_NESTING, Nested, Walker};

impl Walker<'_> {
    /// Records a command and, through its wrappers, every command it runs.
    /// `computed` says, word by word, which are only known when the line runs.
    pub(super) fn push_layers(
        &mut self,
        assignments: &[String],
        words: &[String],
        computed: &[bool],
    ) {
        let mut match_forms = Vec::new();
        let mut allow_assignments: Vec<String> = assignments.to_vec();
        let mut privileged_outer: Option<String> = None;
        let mut layer: &[String] = words;
        let mut hops = 0;
        while let Some(first) = layer.first() {
            let position = words.len() - layer.len();
            if computed.get(position).copied().unwrap_or(false) || has_glob(first) {
                // `timeout 5 $cmd`: the wrapper's command is only known when it runs.
                self.opaque("a command name computed at run time");
            }
            if first.chars().any(char::is_whitespace) {
                // `'echo x' y` runs a program named `echo x`, whose form reads as `echo`'s.
                self.opaque("a command name with blanks in it, which a rule would read as words");
            }
            let name = basename(first);
            let joined = layer.join(" ");
            let with_basename = std::iter::once(name.to_owned())
                .chain(layer[1..].iter().cloned())
                .collect::<Vec<_>>()
                .join(" ");
            for form in [joined.clone(), with_basename] {
                if !match_forms.contains(&form) {
                    match_forms.push(form);
                }
            }
            if !allow_assignments.is_empty() {
                match_forms.push(format!("{} {joined}", allow_assignments.join(" ")));
            }
            self.nested_commands(name, layer, &computed[position.min(computed.len())..]);
            let written_before = self.out.written_paths.len();
            for (at, path) in writers::files_written(name, &layer[1..]) {
                let computed_word = computed.get(position + 1 + at).copied().unwrap_or(true);
                self.written_path(Expanded::from_argument(path, computed_word));
            }
            if writers::makes_links(name, &layer[1..]) {
                let linking = self.out.written_paths.len() - written_before;
                self.progress.links_made = Some(self.progress.links_made.unwrap_or(0) + linking);
            }
            self.names_taken(
                name,
                &layer[1..],
                &computed[(position + 1).min(computed.len())..],
            );
            if matches!(name, "cd" | "pushd" | "popd") {
                self.progress.directory_changed = true;
            }
            hops += 1;
            let Some(unwrapped) = unwrap(name, &layer[1..]) else {
                break;
            };
            if hops > MAX_NESTING {
                self.opaque("wrappers nested too deep to follow");
                break;
            }
            if PRIVILEGE_WRAPPERS.contains(&name) && privileged_outer.is_none() {
                privileged_outer = Some(prefixed(&allow_assignments, &joined));
            }
            if let Some(why) = &unwrapped.unknown_option {
                self.opaque(why.clone());
            }
            if unwrapped.arguments_from_input {
                self.opaque(format!(
                    "`{name}`, whose command's arguments come from its input"
                ));
            }
            for path in unwrapped.reads {
                self.read_path(&Expanded::from_argument(path, false));
            }
            for path in unwrapped.writes {
                self.written_path(Expanded::from_argument(path, false));
            }
            allow_assignments.extend(unwrapped.assignments);
            if let Some(split) = unwrapped.split_line {
                // `env -S 'touch P' echo hi` runs `touch P echo hi`: the words that follow are
                // arguments of the split line's command, not a command of their own.
                let line = std::iter::once(split)
                    .chain(unwrapped.command.iter().map(|word| shell_quote(word)))
                    .collect::<Vec<_>>()
                    .join(" ");
                self.walk_nested(&line, Nested::Value, "a command line run by `env -S`");
                layer = &[];
                break;
            }
            layer = unwrapped.command;
        }
        let mut allow_forms = vec![prefixed(&allow_assignments, &layer.join(" "))];
        if layer.is_empty() {
            // A wrapper with nothing to run (`env`, `time`) is itself the command.
            allow_forms = vec![prefixed(assignments, &words.join(" "))];
        }
        // The words themselves, when each is known as written and means only itself: what
        // the list of known-safe commands reads.
        let start = words.len() - layer.len();
        let plain = !layer.is_empty()
            && allow_assignments.is_empty()
            && privileged_outer.is_none()
            && !computed[start.min(computed.len())..].contains(&true)
            && layer.iter().all(|word| is_plain_word(word));
        let plain_words = if plain { layer.to_vec() } else { Vec::new() };
        allow_forms.extend(privileged_outer);
        self.push_command(match_forms, allow_forms, plain_words);
    }

    pub(super) fn push_command(
        &mut self,
        match_forms: Vec<String>,
        allow_forms: Vec<String>,
        plain_words: Vec<String>,
    ) {
        self.out.commands.push(FoundCommand {
            match_forms,
            allow_forms,
            nested: self.nested,
            plain_words,
        });
    }
}

/// A word that means only its text to bash once quotes are removed: no glob (which could
/// expand to a symlink out of the roots), brace, tilde or expansion (`computed` marks words
/// whose text is only known when the line runs). A quoted `'*.rs'` is refused too: the word's
/// text no longer says whether it was quoted.
fn is_plain_word(word: &str) -> bool {
    !word.starts_with('~') && !word.contains(['*', '?', '[', '{', '$', '`', '\0'])
}

fn basename(command: &str) -> &str {
    command
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .unwrap_or(command)
}

fn prefixed(assignments: &[String], command: &str) -> String {
    if assignments.is_empty() {
        command.to_owned()
    } else {
        format!("{} {command}", assignments.join(" "))
    }
}
