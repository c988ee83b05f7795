//! Errors shared by all crates: a unit that does not parse, and a field with an invalid value.

use thiserror::Error;

/// A quantity string that does not parse as the unit it should have.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot read {input:?} as a {what}; expected {expected}")]
pub struct UnitError {
    /// The text given.
    pub input: String,
    /// The quantity it should be: "time", "size", "bandwidth".
    pub what: &'static str,
    /// The accepted forms, e.g. "a number with a unit: 400Gbps".
    pub expected: &'static str,
}

impl UnitError {
    /// An error for `input`, which does not read as a `what`.
    pub fn new(input: &str, what: &'static str, expected: &'static str) -> Self {
        UnitError {
            input: input.to_string(),
            what,
            expected,
        }
    }
}

/// A user-supplied field with a value llmsim cannot use. The message says what is valid.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Dotted path of the offending field, e.g. `topology.k` or `--nic`.
    pub field: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl FieldError {
    /// An error on `field` saying `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Parses `value` as a unit type, naming `field` in the error.
///
/// # Errors
/// A [`FieldError`] naming `field`, the input and the accepted units.
pub fn parse_field<T>(field: &str, value: &str) -> Result<T, FieldError>
where
    T: std::str::FromStr<Err = UnitError>,
{
    value.parse::<T>().map_err(|e| FieldError::new(field, e.to_string()))
}
