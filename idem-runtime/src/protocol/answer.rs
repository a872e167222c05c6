//! What a key row found means for a request, and the answers that follow from it: step 1's
//! [`Idem::settle`], a `422`'s detail, a `409`.

use super::{Call, Idem, Outcome, OutcomeKind, Record};
use crate::error::Error;
use crate::spec::{ExpiryPolicy, OperationSpec};
use crate::store::staged::Fence;
use crate::store::{Backend, KeyRef, KeyStatus, StoredKey};

impl<DB: Backend> Idem<DB> {
    /// Step 1, for both modes: what a key row found by a lookup at `now` means for `call`.
    ///
    /// The rule of a key's life is the store's ([`StoredKey::status_at`]): only a final
    /// (completed) key expires — `410`, or run again with [`ExpiryPolicy::Reexecute`]. A key
    /// that is not final (a staged execution holds it, or held it and stopped) never
    /// expires, whatever its `expires_at`: it is held by a live lease, or stuck and resumed.
    pub(crate) fn settle(
        &self,
        spec: &OperationSpec,
        call: &Call<'_>,
        stored: Option<StoredKey>,
        now: i64,
    ) -> Result<Settled, Error> {
        let Some(stored) = stored else {
            return Ok(Settled::Run {
                replace_expired: false,
            });
        };
        let status = stored.status_at(now);
        if status == KeyStatus::Expired {
            return match spec.on_expired {
                ExpiryPolicy::Reexecute => Ok(Settled::Run {
                    replace_expired: true,
                }),
                _ => Err(Error::Expired),
            };
        }
        if let Some(unopened) = stored.unopened {
            return Err(Error::Store(unopened.into()));
        }
        if stored.fingerprint.as_slice() != call.fingerprint.as_bytes() {
            return Err(Error::Mismatch(None));
        }
        if let Some(response) = stored.response {
            return Ok(Settled::Answer(Outcome {
                kind: OutcomeKind::Replayed,
                record: Record::from_stored(response),
            }));
        }
        // Not final: an execution holds the key, or held it and stopped.
        Ok(match status {
            KeyStatus::Stuck => Settled::Stuck {
                attempt: stored.fence,
            },
            _ => Settled::Held {
                attempt: stored.fence,
                until: stored.locked_until_ms,
            },
        })
    }

    /// The field digests of `call`'s request, as stored with its key ([`crate::fields`]):
    /// `None` without the request, or with [`Config::mismatch_detail`] off.
    pub(crate) fn field_digests(&self, call: &Call<'_>) -> Option<Vec<u8>> {
        if !self.inner.config.mismatch_detail {
            return None;
        }
        let salt = fastrand::u64(..).to_le_bytes();
        let digests = crate::fields::FieldDigests::of_canonical(call.request?, salt);
        digests.ok().map(|digests| digests.to_bytes())
    }

    /// A `422` for `call` under `key`, whose row has another fingerprint: with the fields
    /// that differ, where the row keeps their digests (read on `conn`; a failure to read them
    /// only leaves them out).
    pub(crate) async fn mismatch(
        &self,
        conn: &mut DB::Connection,
        call: &Call<'_>,
        key: KeyRef<'_>,
    ) -> Error {
        let Some(request) = call.request.filter(|_| self.inner.config.mismatch_detail) else {
            return Error::Mismatch(None);
        };
        let stored = match crate::store::protocol::field_digests::<DB>(conn, key, self.ring()).await
        {
            Ok(stored) => stored,
            Err(error) => {
                tracing::debug!(%error, "the key's field digests could not be read");
                None
            }
        };
        let mismatch = stored
            .as_deref()
            .and_then(crate::fields::FieldDigests::from_bytes)
            .and_then(|stored| stored.compare(request).ok());
        Error::Mismatch(mismatch.map(Box::new))
    }

    /// How `body`, a body the operation's extractor refused, differs from the request `key`
    /// was first used with: the key's answer comes before the refusal. `None` — the refusal
    /// stands — without [`Config::mismatch_detail`], when the key has no unexpired row with
    /// field digests, when no body field differs, or when the store fails.
    pub(crate) async fn refused_mismatch(
        &self,
        spec: &OperationSpec,
        key: KeyRef<'_>,
        body: &serde_json::Value,
    ) -> Option<crate::fields::Mismatch> {
        if !self.inner.config.mismatch_detail || !spec.mismatch_detail {
            return None;
        }
        let mut conn = self.acquire_bounded().await.ok()?;
        let row = crate::store::protocol::lookup::<DB>(&mut conn, key, self.ring())
            .await
            .ok()??;
        if row.expires_at_ms <= self.now_millis() {
            return None;
        }
        let stored = crate::store::protocol::field_digests::<DB>(&mut conn, key, self.ring())
            .await
            .ok()??;
        let stored = crate::fields::FieldDigests::from_bytes(&stored)?;
        let mismatch = stored.compare_body(body, spec.fingerprint_exclude);
        (!mismatch.is_empty()).then_some(mismatch)
    }

    pub(crate) fn in_flight(&self) -> Error {
        Error::InFlight {
            retry_after: self.inner.config.retry_after,
        }
    }
}

/// What a key row means for a request ([`Idem::settle`]).
pub(crate) enum Settled {
    /// Answer without running: a replay.
    Answer(Outcome),
    /// Run the work; `replace_expired` when an expired row is in the way.
    Run { replace_expired: bool },
    /// Not final, and attempt `attempt`'s lease is live (until `until`; `None`: no lease):
    /// `409`, or wait — or, where the attempt's hold proves its owner gone
    /// ([`crate::hold`]), take it over at once.
    Held { attempt: Fence, until: Option<i64> },
    /// Not final, and its attempt's lease ran out: take it over and resume.
    Stuck { attempt: Fence },
}
