//! The reading of one key's value: a `Field` knows its full key path and where its key and
//! value lie in the file, reads its value as the type and within the `Bounds` asked, and turns
//! whatever it refuses into a `Fault` that names the key and points at the key or value.

use std::borrow::Cow;
use std::fmt::Display;
use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{DAY_MS, Fault};
use crate::config::{GIB, KIB, MIB};
use crate::permission::{home_dir, lint};

/// Where a value must lie. The upper ends are far above any sane setting: they catch a
/// misplaced digit or a value given in the wrong unit, not a deliberate choice.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) min: u64,
    pub(super) max: u64,
    pub(super) unit: Unit,
}

/// How a bound is shown in an error.
#[derive(Debug, Clone, Copy)]
pub(super) enum Unit {
    Count,
    Bytes,
    Millis,
}

/// One key of the file with its value: its full key path, where it is, what it holds.
pub(super) struct Field<'a, 'i> {
    /// The last segment of the key, which the readers match on.
    pub(super) name: &'a str,
    /// The full key path, as errors show it: `hooks.pre_tool_use[1].matcher`.
    pub(super) key: String,
    key_span: Range<usize>,
    pub(super) value: &'a Spanned<DeValue<'i>>,
}

/// The entries of a table, keyed below `prefix`.
pub(super) fn fields<'a, 'i>(
    table: &'a DeTable<'i>,
    prefix: Option<String>,
) -> impl Iterator<Item = Field<'a, 'i>> {
    table.iter().map(move |(key, value)| {
        let name: &str = key.get_ref();
        let segment = show_key(name);
        Field {
            name,
            key: match &prefix {
                Some(prefix) => format!("{prefix}.{segment}"),
                None => segment.into_owned(),
            },
            key_span: key.span(),
            value,
        }
    })
}

/// A key as TOML would write it: bare when it may be, quoted otherwise.
fn show_key(name: &str) -> Cow<'_, str> {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(format!("{name:?}"))
    }
}

impl<'a, 'i> Field<'a, 'i> {
    /// A fault in the value.
    pub(super) fn fault(&self, reason: String) -> Fault {
        Fault {
            key: self.key.clone(),
            span: self.value.span(),
            reason,
        }
    }

    /// A fault in the key itself: a name that is not allowed, or a table's problem as a whole.
    pub(super) fn key_fault(&self, reason: String) -> Fault {
        Fault {
            key: self.key.clone(),
            span: self.key_span.clone(),
            reason,
        }
    }

    /// A key that has no business here; a near miss gets a suggestion, anything else the list.
    pub(super) fn unknown(&self, known: &[&str]) -> Fault {
        let nearest = known
            .iter()
            .map(|candidate| (lint::edit_distance(self.name, candidate), candidate))
            .min();
        let reason = match nearest {
            Some((distance, candidate)) if distance <= 2 => {
                format!("unknown key; did you mean `{candidate}`?")
            }
            _ => format!("unknown key; the keys here are {}", known.join(", ")),
        };
        Fault {
            key: self.key.clone(),
            span: self.key_span.clone(),
            reason,
        }
    }

    pub(super) fn wrong_type(&self, expected: &str) -> Fault {
        let found = self.value.get_ref().type_str();
        let article = if found.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        self.fault(format!("expected {expected}, found {article} {found}"))
    }

    pub(super) fn integer(&self, bounds: Bounds) -> Result<u64, Fault> {
        let DeValue::Integer(integer) = self.value.get_ref() else {
            return Err(self.wrong_type("an integer"));
        };
        // Only a number beyond u64 (either way) fails to parse: it is out of bounds too.
        let value = u64::from_str_radix(integer.as_str(), integer.radix()).map_err(|_| {
            if integer.as_str().starts_with('-') {
                self.below(bounds, integer)
            } else {
                self.above(bounds, integer)
            }
        })?;
        if value < bounds.min {
            return Err(self.below(bounds, value));
        }
        if value > bounds.max {
            return Err(self.above(bounds, value));
        }
        Ok(value)
    }

    fn below(&self, bounds: Bounds, got: impl Display) -> Fault {
        let min = show_bound(bounds.min, bounds.unit);
        self.fault(format!("must be at least {min}, got {got}"))
    }

    fn above(&self, bounds: Bounds, got: impl Display) -> Fault {
        let max = show_bound(bounds.max, bounds.unit);
        self.fault(format!("must be at most {max}, got {got}"))
    }

    /// An integer that counts bytes or things in memory.
    pub(super) fn size(&self, bounds: Bounds) -> Result<usize, Fault> {
        let value = self.integer(bounds)?;
        usize::try_from(value)
            .map_err(|_| self.fault(format!("{value} does not fit this machine's memory")))
    }

    pub(super) fn boolean(&self) -> Result<bool, Fault> {
        match self.value.get_ref() {
            DeValue::Boolean(value) => Ok(*value),
            _ => Err(self.wrong_type("true or false")),
        }
    }

    pub(super) fn string(&self) -> Result<&'a str, Fault> {
        match self.value.get_ref() {
            DeValue::String(text) => Ok(text.as_ref()),
            _ => Err(self.wrong_type("a string")),
        }
    }

    /// An absolute path, or one under `~/` (expanded here).
    pub(super) fn absolute_path(&self) -> Result<PathBuf, Fault> {
        let text = self.string()?;
        let path = match text.strip_prefix("~/") {
            Some(rest) => home_dir().join(rest),
            None if text == "~" => home_dir(),
            None => PathBuf::from(text),
        };
        if !path.is_absolute() {
            return Err(self.fault(format!(
                "{text:?} is not an absolute path (or one that starts with ~/)"
            )));
        }
        Ok(path)
    }

    /// The entries of a table value, keyed below this one.
    pub(super) fn entries(
        &self,
    ) -> Result<impl Iterator<Item = Field<'a, 'i>> + use<'a, 'i>, Fault> {
        match self.value.get_ref() {
            DeValue::Table(table) => Ok(fields(table, Some(self.key.clone()))),
            _ => Err(self.wrong_type("a table")),
        }
    }

    /// The items of an array value, keyed `key[index]`; `expected` describes the array.
    pub(super) fn elements(
        &self,
        expected: &str,
    ) -> Result<impl Iterator<Item = Field<'a, 'i>> + use<'a, 'i>, Fault> {
        let DeValue::Array(items) = self.value.get_ref() else {
            return Err(self.wrong_type(expected));
        };
        let key = self.key.clone();
        Ok(items.iter().enumerate().map(move |(index, item)| Field {
            name: "",
            key: format!("{key}[{index}]"),
            key_span: item.span(),
            value: item,
        }))
    }
}

/// A bound as a number, with its size in a friendlier unit where that helps.
fn show_bound(value: u64, unit: Unit) -> String {
    let friendly = match unit {
        Unit::Count => None,
        Unit::Bytes => [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")]
            .into_iter()
            .find(|(size, _)| value >= *size && value.is_multiple_of(*size))
            .map(|(size, name)| format!("{} {name}", value / size)),
        Unit::Millis => [(DAY_MS, "d"), (60 * 60 * 1000, "h"), (60 * 1000, "min")]
            .into_iter()
            .find(|(size, _)| value >= *size && value.is_multiple_of(*size))
            .map(|(size, name)| format!("{} {name}", value / size)),
    };
    match friendly {
        Some(friendly) => format!("{value} ({friendly})"),
        None => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_are_suggested() {
        assert_eq!(lint::edit_distance("max_paralel", "max_parallel"), 1);
    }

    #[test]
    fn bounds_show_friendly_units() {
        assert_eq!(show_bound(GIB, Unit::Bytes), "1073741824 (1 GiB)");
        assert_eq!(show_bound(1000, Unit::Bytes), "1000");
        assert_eq!(show_bound(DAY_MS, Unit::Millis), "86400000 (1 d)");
        assert_eq!(show_bound(8, Unit::Count), "8");
    }
}
