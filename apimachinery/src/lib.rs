//! The few rules of Kubernetes' apimachinery that both halves of kubewasm must apply
//! identically: the informer (client side, validating subscriptions and filtering its cache) and
//! the embedded API server (serving `labelSelector` / `fieldSelector` and checking names).
//!
//! - [`LabelSelector`]: parse and match the label-selector string syntax.
//! - [`FieldSelector`]: parse the field-selector string syntax and match it on a JSON object.
//! - [`validation`]: DNS-1123 labels and subdomains, label keys and values, `apiVersion` and
//!   `kind` syntax, with the API server's lengths and character sets.
//! - [`ShardSelector`]: KEP-5866's `shardSelector` (FNV-1a ranges of an object's uid or
//!   namespace): parse, print and match.
//! - [`text`]: cutting text to a byte budget on a character boundary, marked or not.
//!
//! Pure functions over strings and JSON values: this crate knows nothing of HTTP, caches,
//! watches or which fields a kind supports, and depends on nothing of kubewasm.

#![warn(missing_docs)]

mod fields;
mod labels;
mod shards;
pub mod text;
pub mod validation;

pub use fields::{FieldOp, FieldRequirement, FieldSelector, escape_value};
pub use labels::{LabelSelector, Labels, Operator, Requirement};
pub use shards::{MAX_SHARD_RANGES, ShardField, ShardSelector, fnv1a64};

/// Why a selector string was refused. The message names the offending token or value, never
/// the whole input (callers add which field and value it was).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    message: String,
}

impl SelectorError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl From<SelectorError> for String {
    fn from(e: SelectorError) -> Self {
        e.message
    }
}
