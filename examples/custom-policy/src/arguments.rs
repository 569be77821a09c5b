//! Reading named top-level members of a call's arguments without building the whole value.
//!
//! The host hands the arguments over as canonical JSON text (an object, keys sorted, no
//! whitespace). Parsing it into a `serde_json::Value` would allocate every key and string
//! of the call, including a file's whole content in a `write_file` call. Instead a serde
//! visitor walks the top-level object once: members whose key is not asked for are skipped
//! with [`IgnoredAny`] (validated, never built), and the asked-for string values are
//! borrowed from the text, copied only when they contain an escape. The one allocation is
//! the small list of members found.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A member's value as a policy check needs it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arg<'a> {
    /// A string, borrowed from the arguments text when it has no escapes.
    Text(Cow<'a, str>),
    /// Anything else, by kind (`a number`, `an object`, ...), for the reason.
    NotText(&'static str),
}

/// The top-level members of the object `arguments` whose key is one of `names`, each with
/// the index of its name, in the order they appear.
///
/// # Errors
/// When `arguments` is not one JSON object.
pub(crate) fn find<'a>(
    arguments: &'a str,
    names: &[String],
) -> Result<Vec<(usize, Arg<'a>)>, serde_json::Error> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut de = serde_json::Deserializer::from_str(arguments);
    let found = de.deserialize_map(TopLevel { names })?;
    de.end()?;
    Ok(found)
}

struct TopLevel<'n> {
    names: &'n [String],
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Vec<(usize, Arg<'de>)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of arguments")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match self.names.iter().position(|name| *name == *key) {
                Some(index) => found.push((index, map.next_value::<Arg<'de>>()?)),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// A member's key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Arg<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ArgVisitor;
        impl<'de> Visitor<'de> for ArgVisitor {
            type Value = Arg<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Arg::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Arg::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Arg::NotText("a boolean"))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Arg::NotText("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Arg::NotText("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Arg::NotText("a number"))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Arg::NotText("null"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Arg::NotText("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Arg::NotText("an object"))
            }
        }
        deserializer.deserialize_any(ArgVisitor)
    }
}
