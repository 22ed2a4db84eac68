//! A value written as one shell word: how grants, escalations, a call's `env` and imported
//! rules put values into the texts rules read.

/// A value as a shell word: plain when it is safe as it is, single-quoted otherwise, so that
/// a grant of `A='x y' cmd` can never read as another assignment.
pub(crate) fn shell_quoted(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:,+@%".contains(c))
    {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\'', "'\\''"))
}
