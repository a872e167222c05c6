//! The words of an operation: its scope, expiry policy, key requirement, mode and the like,
//! each with the one spelling every crate reads and writes.

use std::fmt;
use std::str::FromStr;

/// A word that is not one of a vocabulary's spellings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord {
    /// What the word was meant to be: `scope`, `on_expired policy`, …
    pub what: &'static str,
    /// The word as given.
    pub given: String,
    /// The accepted spellings.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}`; expected one of: ",
            self.what, self.given
        )?;
        for (i, word) in self.expected.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{word}`")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownWord {}

/// Defines an enum of spelled-out words with `as_str`, `ALL` and `FromStr`.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal {
            $($(#[$vmeta:meta])* $variant:ident => $word:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
            /// Every spelling, in declaration order.
            pub const WORDS: &'static [&'static str] = &[$($word),+];

            /// The spelling used in the attribute, the store and the operator tool.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $word),+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<Self, UnknownWord> {
                match s {
                    $($word => Ok(Self::$variant),)+
                    _ => Err(UnknownWord { what: $what, given: s.to_owned(), expected: Self::WORDS }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words! {
    /// Whose keys share one namespace.
    ScopeKind, "scope" {
        /// One namespace per tenant, taken from the application's authenticated principal,
        /// never from a client-supplied header.
        Tenant => "tenant",
        /// One namespace per authenticated user.
        User => "user",
        /// One namespace for every caller: for operations without callers of their own (jobs,
        /// webhooks from one provider).
        Global => "global",
    }
}

words! {
    /// What a request with an expired key gets.
    #[derive(Default)]
    ExpiryPolicy, "on_expired policy" {
        /// `410 Gone`; nothing runs. The default: a client retrying after the TTL is more
        /// likely a bug than a new intent.
        #[default]
        Gone => "gone",
        /// The old row is replaced atomically and the operation runs again, as if the key
        /// were new.
        Reexecute => "reexecute",
    }
}

words! {
    /// Whether a request without `Idempotency-Key` is accepted.
    #[derive(Default)]
    KeyRequirement, "key requirement" {
        /// Missing key → `400`. The default.
        #[default]
        Required => "required",
        /// Missing key → the operation runs once in its transaction, with no protection.
        Optional => "optional",
    }
}

words! {
    /// How an operation's effects are made exactly-once.
    #[non_exhaustive]
    #[derive(Default)]
    Mode, "mode" {
        /// The key, the handler's writes and the stored response commit in one database
        /// transaction. For effects inside the database. The default.
        #[default]
        Atomic => "atomic",
        /// For effects outside the database (a payment provider, an email): the key is
        /// reserved at once with a lease, the work runs as named, journaled steps, and an
        /// attempt that dies is resumed from its last recorded step.
        Staged => "staged",
    }
}

words! {
    /// Which spellings of the `Idempotency-Key` header a server accepts: a setting of the
    /// server (the runtime's `Config::key_format`), written into the documents it serves so
    /// that they describe exactly what it accepts.
    #[derive(Default)]
    KeyFormat, "key format" {
        /// Structured-field strings (`"abc"`), and bare keys (`abc`) that could have been the
        /// content of one: no `"` and no `\` (many clients follow Stripe and send the key
        /// unquoted). The default.
        #[default]
        Lenient => "lenient",
        /// Only structured-field strings, as the IETF httpapi draft specifies.
        Strict => "strict",
    }
}

words! {
    /// What a retry gets while a staged execution of its key is still running.
    #[derive(Default)]
    InFlightPolicy, "on_in_flight policy" {
        /// `409` with `Retry-After` at once. The default.
        #[default]
        Reject => "reject",
        /// Wait for the running execution, up to the configured in-flight wait, and answer
        /// with its response (or `409` past the wait).
        Wait => "wait",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for kind in ScopeKind::ALL {
            assert_eq!(kind.as_str().parse::<ScopeKind>(), Ok(*kind));
        }
        for policy in ExpiryPolicy::ALL {
            assert_eq!(policy.as_str().parse::<ExpiryPolicy>(), Ok(*policy));
        }
        assert_eq!("optional".parse(), Ok(KeyRequirement::Optional));
        assert_eq!("atomic".parse(), Ok(Mode::Atomic));
        assert_eq!("staged".parse(), Ok(Mode::Staged));
        assert_eq!("wait".parse(), Ok(InFlightPolicy::Wait));
        assert_eq!("strict".parse(), Ok(KeyFormat::Strict));
        assert_eq!(KeyFormat::default().as_str(), "lenient");
    }

    #[test]
    fn unknown_words_list_the_options() {
        let error = "tenants".parse::<ScopeKind>().err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("unknown scope `tenants`; expected one of: `tenant`, `user`, `global`")
        );
    }
}
