//! [`KeyRef`]: the identity of one key row.

/// The identity of one key row: (scope, operation, idempotency_key), the table's primary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyRef<'a> {
    /// `global`, `tenant:<id>` or `user:<id>`.
    pub scope: &'a str,
    /// The operation id, e.g. `create_order:v1`.
    pub operation: &'a str,
    /// The client's key.
    pub key: &'a str,
}
