//! The operator's settings: the `[settings]` table of the plugin's manifest
//! (`kubewasm:handler/settings@0.3.0`), read as typed values. [`get`] and [`require`] parse one
//! top-level setting with [`FromStr`] (TOML strings arrive as their text, numbers and booleans as
//! their TOML spelling, arrays and tables as JSON); [`parse`] deserializes the whole table into a
//! type of the plugin's own. Every error names the setting and what was expected, so returned
//! from `validate_settings` it is the message the operator reads when the host refuses the load:
//!
//! ```ignore
//! fn validate_settings() -> kubewasm_sdk::Result<()> {
//!     let replicas: u32 = settings::get("replicas")?.unwrap_or(1);
//!     // setting "replicas": expected an integer, got "three"
//!     Ok(())
//! }
//! ```
//!
//! Settings are readable from every export, `describe` included (an origin the operator
//! configured). They are the operator's, not secrets: the host logs their changes.

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::world::imports;

/// Why a setting could not be read as asked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettingsError {
    /// A setting [`require`] needs (or a field [`parse`]'s type does not default) is not set.
    Missing {
        /// The setting's key (a dotted path for [`parse`]'s nested fields).
        key: String,
        /// What it should have been, e.g. `an integer`; empty when unknown.
        expected: String,
    },
    /// A setting is set but is not what the plugin expects.
    Invalid {
        /// The setting's key (a dotted path for [`parse`]'s nested fields).
        key: String,
        /// What it should have been, e.g. `an integer from 0 to 255`.
        expected: String,
        /// What the operator wrote, as the host gave it (or as serde describes it).
        got: String,
    },
    /// The component exports a world without settings (`handler_v0_1!`: 0.1.0 has none).
    Unavailable,
}

impl SettingsError {
    /// The key the error is about; `None` for [`SettingsError::Unavailable`].
    pub fn key(&self) -> Option<&str> {
        match self {
            SettingsError::Missing { key, .. } | SettingsError::Invalid { key, .. } => Some(key),
            SettingsError::Unavailable => None,
        }
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::Missing { key, expected } if expected.is_empty() => {
                write!(f, "setting {key:?}: required, but it is not set")
            }
            SettingsError::Missing { key, expected } => {
                write!(f, "setting {key:?}: expected {expected}, but it is not set")
            }
            SettingsError::Invalid { key, expected, got } => {
                write!(f, "setting {key:?}: expected {expected}, got {got}")
            }
            SettingsError::Unavailable => f.write_str(
                "settings are a kubewasm:handler@0.3.0 import: a 0.1.0 component \
                 (handler_v0_1!) has none",
            ),
        }
    }
}

impl std::error::Error for SettingsError {}

/// A settings error is [`Error::Fatal`]: the same settings fail the same way until the operator
/// changes them (which reloads the plugin). So `?` works in every export, and in
/// `validate_settings` the message becomes the host's reason for refusing the load.
impl From<SettingsError> for Error {
    fn from(e: SettingsError) -> Self {
        Error::Fatal(e.to_string())
    }
}

/// The setting `key` parsed as `T` (`String`, integers, floats, `bool`, or any [`FromStr`]
/// type); `Ok(None)` when the table does not have the key.
pub fn get<T: FromStr>(key: &str) -> Result<Option<T>, SettingsError>
where
    T::Err: fmt::Display,
{
    let get = imports().settings_get.ok_or(SettingsError::Unavailable)?;
    parse_value(key, get(key))
}

/// [`get`] for a setting the plugin cannot do without: [`SettingsError::Missing`] when unset.
pub fn require<T: FromStr>(key: &str) -> Result<T, SettingsError>
where
    T::Err: fmt::Display,
{
    let get = imports().settings_get.ok_or(SettingsError::Unavailable)?;
    parse_required(key, get(key))
}

/// The pure part of [`require`].
fn parse_required<T: FromStr>(key: &str, raw: Option<String>) -> Result<T, SettingsError>
where
    T::Err: fmt::Display,
{
    parse_value(key, raw)?.ok_or_else(|| SettingsError::Missing {
        key: key.to_string(),
        expected: expected::<T>().to_string(),
    })
}

/// The whole table deserialized into `T` (a `serde` struct, usually with `#[serde(default)]`
/// for what the operator may leave out): from `get-json`, so numbers are numbers and tables are
/// maps. An error names the field by its dotted path (`limits.cpu`, `origins[1]`).
pub fn parse<T: DeserializeOwned>() -> Result<T, SettingsError> {
    let json = imports().settings_json.ok_or(SettingsError::Unavailable)?;
    parse_json(&json())
}

/// Every top-level setting as the host gives it (text, TOML spelling or JSON), sorted by key.
pub fn all() -> Result<Vec<(String, String)>, SettingsError> {
    let all = imports().settings_all.ok_or(SettingsError::Unavailable)?;
    Ok(all())
}

/// The pure part of [`get`]: `raw` is what the host answered for `key`.
fn parse_value<T: FromStr>(key: &str, raw: Option<String>) -> Result<Option<T>, SettingsError>
where
    T::Err: fmt::Display,
{
    let Some(raw) = raw else { return Ok(None) };
    raw.parse::<T>().map(Some).map_err(|e| {
        let what = expected::<T>();
        SettingsError::Invalid {
            key: key.to_string(),
            expected: what.describe(&raw, &e.to_string()),
            got: format!("{raw:?}"),
        }
    })
}

/// The pure part of [`parse`]: `json` is the host's `get-json`.
fn parse_json<T: DeserializeOwned>(json: &str) -> Result<T, SettingsError> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // serde_json appends the position in the host's JSON, which means nothing to the operator.
        let message = match message.rfind(" at line ") {
            Some(at) => &message[..at],
            None => &message[..],
        };
        // serde names a missing field from the struct that lacks it.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            let key = match path.as_str() {
                "." | "" => field.to_string(),
                parent => format!("{parent}.{field}"),
            };
            return SettingsError::Missing {
                key,
                expected: String::new(),
            };
        }
        let key = if path == "." { String::new() } else { path };
        // `invalid type: string "three", expected u32` reads better the other way round.
        for prefix in ["invalid type: ", "invalid value: ", "invalid length "] {
            if let Some((got, expected)) = message
                .strip_prefix(prefix)
                .and_then(|m| m.split_once(", expected "))
            {
                return SettingsError::Invalid {
                    key,
                    expected: expected.to_string(),
                    got: got.to_string(),
                };
            }
        }
        SettingsError::Invalid {
            key,
            expected: "a valid value".to_string(),
            got: message.to_string(),
        }
    })
}

/// What a [`FromStr`] type expects, in words, from its type name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expected {
    /// An integer type, with its range.
    Integer(String, String),
    NonZero,
    Number,
    Bool,
    Char,
    Text,
    /// Any other type: its last path segment, e.g. `IpAddr`.
    Other(&'static str),
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Integer(..) => f.write_str("an integer"),
            Expected::NonZero => f.write_str("a non-zero integer"),
            Expected::Number => f.write_str("a number"),
            Expected::Bool => f.write_str("a boolean (true or false)"),
            Expected::Char => f.write_str("a single character"),
            Expected::Text => f.write_str("a string"),
            Expected::Other(name) => write!(f, "a valid {name}"),
        }
    }
}

impl Expected {
    /// The expectation for `raw`, which failed to parse with `error`: an integer out of range
    /// says the range, another type says its parser's reason.
    fn describe(&self, raw: &str, error: &str) -> String {
        match self {
            Expected::Integer(min, max)
                if raw.parse::<i128>().is_ok() || raw.parse::<u128>().is_ok() =>
            {
                format!("an integer from {min} to {max}")
            }
            Expected::Other(_) if !error.is_empty() => format!("{self} ({error})"),
            _ => self.to_string(),
        }
    }
}

/// What `T` expects, from its type name (the standard library's types by name, others by their
/// last path segment).
fn expected<T>() -> Expected {
    let name = std::any::type_name::<T>();
    macro_rules! integers {
        ($($t:ty),*) => {
            $(if name == std::any::type_name::<$t>() {
                return Expected::Integer(<$t>::MIN.to_string(), <$t>::MAX.to_string());
            })*
        };
    }
    integers!(
        i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
    );
    match name {
        "f32" | "f64" => Expected::Number,
        "bool" => Expected::Bool,
        "char" => Expected::Char,
        "alloc::string::String" => Expected::Text,
        n if n.starts_with("core::num::nonzero::NonZero") => Expected::NonZero,
        n => Expected::Other(last_segment(n)),
    }
}

/// `Foo` of `a::b::Foo<c::D>`.
fn last_segment(type_name: &'static str) -> &'static str {
    let base = type_name.split('<').next().unwrap_or(type_name);
    base.rsplit("::").next().unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::net::IpAddr;
    use std::num::NonZeroU32;

    fn value<T: FromStr>(raw: &str) -> Result<Option<T>, SettingsError>
    where
        T::Err: fmt::Display,
    {
        parse_value("replicas", Some(raw.to_string()))
    }

    fn message<T: fmt::Debug>(r: Result<T, SettingsError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn values_parse_as_their_type_and_an_absent_key_is_none() {
        assert_eq!(value::<u32>("3"), Ok(Some(3)));
        assert_eq!(value::<i64>("-3"), Ok(Some(-3)));
        assert_eq!(value::<f64>("0.5"), Ok(Some(0.5)));
        assert_eq!(value::<f64>("3"), Ok(Some(3.0)));
        assert_eq!(value::<bool>("true"), Ok(Some(true)));
        assert_eq!(value::<String>("a b"), Ok(Some("a b".to_string())));
        assert_eq!(parse_value::<u32>("replicas", None), Ok(None));
    }

    #[test]
    fn a_bad_value_names_the_key_the_expected_type_and_what_was_written() {
        assert_eq!(
            message(value::<u32>("three")),
            r#"setting "replicas": expected an integer, got "three""#
        );
        assert_eq!(
            message(value::<u8>("300")),
            r#"setting "replicas": expected an integer from 0 to 255, got "300""#
        );
        assert_eq!(
            message(value::<u32>("-1")),
            r#"setting "replicas": expected an integer from 0 to 4294967295, got "-1""#
        );
        assert_eq!(
            message(value::<f32>("half")),
            r#"setting "replicas": expected a number, got "half""#
        );
        assert_eq!(
            message(value::<bool>("yes")),
            r#"setting "replicas": expected a boolean (true or false), got "yes""#
        );
        assert_eq!(
            message(parse_required::<String>("image", None)),
            r#"setting "image": expected a string, but it is not set"#
        );
        assert_eq!(
            message(value::<NonZeroU32>("0")),
            r#"setting "replicas": expected a non-zero integer, got "0""#
        );
        assert_eq!(
            message(value::<IpAddr>("localhost")),
            r#"setting "replicas": expected a valid IpAddr (invalid IP address syntax), got "localhost""#
        );
        let e = value::<u32>("x").unwrap_err();
        assert_eq!(e.key(), Some("replicas"));
        assert_eq!(
            Error::from(e.clone()),
            Error::Fatal(e.to_string()),
            "a bad setting does not heal by retrying"
        );
    }

    #[test]
    fn a_required_setting_that_is_absent_says_what_it_should_be() {
        assert_eq!(parse_required::<u16>("port", Some("80".into())), Ok(80));
        let e = parse_required::<u16>("port", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"setting "port": expected an integer, but it is not set"#
        );
        assert_eq!(
            message(parse_required::<u16>("port", Some("x".into()))),
            r#"setting "port": expected an integer, got "x""#
        );
        assert_eq!(
            SettingsError::Missing {
                key: "image".into(),
                expected: String::new()
            }
            .to_string(),
            r#"setting "image": required, but it is not set"#
        );
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Limits {
        cpu: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Settings {
        replicas: u32,
        #[serde(default)]
        origins: Vec<String>,
        limits: Option<Limits>,
    }

    #[test]
    fn the_table_deserializes_into_the_plugins_type() {
        let s: Settings =
            parse_json(r#"{"replicas":3,"origins":["https://a.example"],"limits":{"cpu":"1"}}"#)
                .unwrap();
        assert_eq!(
            s,
            Settings {
                replicas: 3,
                origins: vec!["https://a.example".into()],
                limits: Some(Limits { cpu: "1".into() }),
            }
        );
        let empty: std::collections::BTreeMap<String, serde_json::Value> =
            parse_json("{}").unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn a_table_that_does_not_fit_names_the_field_by_its_path() {
        assert_eq!(
            message(parse_json::<Settings>(r#"{"replicas":"three"}"#)),
            r#"setting "replicas": expected u32, got string "three""#
        );
        assert_eq!(
            message(parse_json::<Settings>(
                r#"{"replicas":1,"origins":["a",2]}"#
            )),
            r#"setting "origins[1]": expected a string, got integer `2`"#
        );
        assert_eq!(
            message(parse_json::<Settings>(r#"{"replicas":1,"limits":{}}"#)),
            r#"setting "limits.cpu": required, but it is not set"#
        );
        let e = parse_json::<Settings>(r#"{}"#).unwrap_err();
        assert_eq!(e.key(), Some("replicas"));
        assert_eq!(
            e.to_string(),
            r#"setting "replicas": required, but it is not set"#
        );
    }
}
