//! Keeping the key table small and watched: the sweep of expired keys, the operation
//! registry, the count of stuck keys.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::clock::millis;
use crate::docs::OperationDoc;
use crate::protocol::Idem;
use crate::spec::{Mode, OperationSpec};
use crate::store::{Backend, KeyFilter, KeyStatus, Registration, StoreError};
use crate::telemetry;

impl<DB: Backend> Idem<DB> {
    /// Deletes keys that expired more than `grace` ago, `batch` rows per statement with
    /// `pause` between statements, until none are left. Returns how many were deleted.
    ///
    /// Each batch is one short statement (on PostgreSQL it skips rows a running request
    /// holds), so the sweep never blocks requests for long; the pause bounds how much of the
    /// database's write capacity it takes from them.
    ///
    /// A deleted key is unknown again: with
    /// [`ExpiryPolicy::Gone`](crate::spec::ExpiryPolicy::Gone) a request for it after the
    /// sweep runs anew, so choose `grace` longer than any client keeps retrying.
    ///
    /// # Errors
    /// When the store fails; rows deleted by earlier batches stay deleted.
    pub async fn sweep_expired(
        &self,
        grace: Duration,
        batch: u32,
        pause: Duration,
    ) -> Result<u64, StoreError> {
        let before = self.now_millis().saturating_sub(millis(grace));
        let batch = batch.max(1);
        let table = self.keys();
        let mut total = 0;
        loop {
            let deleted = table.sweep_batch(before, batch).await?;
            total += deleted;
            if deleted < u64::from(batch) {
                return Ok(total);
            }
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

impl<DB: Backend> Idem<DB> {
    /// Records how this service runs `operations` in the database's operation registry
    /// (`idempotency_operations`): their scope, ttl, mode and lease, which the operator tool
    /// `idem` shows beside their keys, and their client contract (an
    /// [`OperationDoc`] as JSON), from which `idem docs` renders
    /// the documentation without the service's binary. Call it once at start; a later
    /// registration of the same operation id replaces the earlier one.
    ///
    /// Operations registered this way have no route; [`Idem::register_docs`] records the
    /// documents the attribute's registry holds, routes included.
    ///
    /// ```no_run
    /// # async fn demo(idem: idem_runtime::Idem<idem_runtime::sqlx::Sqlite>) -> Result<(), idem_runtime::store::StoreError> {
    /// use idem_runtime::spec::OperationSpec;
    ///
    /// const CREATE_ORDER: OperationSpec = OperationSpec::new("create_order:v1");
    /// idem.register(&[&CREATE_ORDER]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// When the store fails.
    pub async fn register(&self, operations: &[&OperationSpec]) -> Result<(), StoreError> {
        let docs: Vec<OperationDoc> = operations
            .iter()
            .map(|spec| OperationDoc::from_spec(spec))
            .collect();
        self.register_docs(&docs).await
    }

    /// Records these documented operations in the database's operation registry, as
    /// [`Idem::register`] does, with what their documents add (route, handler, source, the
    /// operation's own responses), each as this server answers it
    /// ([`Config::doc`](crate::Config::doc): its key format; its lease, set by
    /// [`Config::lease_for`](crate::Config::lease_for), in the registry's column too; the
    /// `422`'s field names; storage sealing): typically every operation of the service,
    /// [`Operations::from_registry`](crate::docs::Operations::from_registry) plus those run
    /// through the plain function API.
    ///
    /// ```no_run
    /// # async fn demo(idem: idem_runtime::Idem<idem_runtime::sqlx::Sqlite>) -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_runtime::docs::Operations;
    ///
    /// let operations = Operations::from_registry()?;
    /// idem.register_docs(operations.docs()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// When the store fails.
    pub async fn register_docs(&self, docs: &[OperationDoc]) -> Result<(), StoreError> {
        let now = self.now_millis();
        let registrations: Vec<Registration> = docs
            .iter()
            .map(|doc| {
                // As this server answers: its key format, leases, sealing (Config::doc).
                let doc = self.config().doc(doc.clone());
                Registration {
                    operation: doc.id.clone(),
                    scope: doc.scope,
                    ttl_ms: millis(doc.ttl),
                    mode: doc.mode,
                    lease_ms: matches!(doc.mode, Mode::Staged).then(|| millis(doc.lease)),
                    registered_at_ms: now,
                    doc: serde_json::to_string(&doc).ok(),
                }
            })
            .collect();
        self.keys().register(&registrations).await
    }
}

/// Operations whose [`STUCK_KEYS`](telemetry::STUCK_KEYS) gauge this process set, so that a
/// later observation brings them back to 0.
static STUCK_REPORTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

impl<DB: Backend> Idem<DB> {
    /// Counts the staged keys that are stuck now — processing, their lease run out — by
    /// operation id, and sets the [`STUCK_KEYS`](telemetry::STUCK_KEYS) gauge
    /// (`idem_stuck_keys{operation}`) of each: every operation registered as staged
    /// ([`Idem::register`]) and every one this process reported before get a value, 0 when
    /// none of their keys is stuck.
    ///
    /// It reads `idempotency_processing`, which holds only the keys being processed, and the
    /// operation registry: cheap enough for a timer of a few seconds. A running
    /// [`Reconciler`](crate::staged::Reconciler) calls it after every pass; without one, call
    /// it on a timer of your own:
    ///
    /// ```no_run
    /// # async fn demo(idem: idem_runtime::Idem<idem_runtime::sqlx::Sqlite>) {
    /// let mut every = tokio::time::interval(std::time::Duration::from_secs(15));
    /// loop {
    ///     every.tick().await;
    ///     if let Err(error) = idem.observe_stuck().await {
    ///         tracing::warn!(%error, "could not count stuck keys");
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// When the store fails; no gauge changes then.
    pub async fn observe_stuck(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let now = self.now_millis();
        let table = self.keys();
        let mut stuck: BTreeMap<String, u64> = table
            .registrations()
            .await?
            .into_iter()
            .filter(|registration| registration.mode == Mode::Staged)
            .map(|registration| (registration.operation, 0))
            .collect();
        let mut filter = KeyFilter::new()
            .status(KeyStatus::Stuck)
            .limit(KeyFilter::MAX_LIMIT);
        loop {
            let page = table.list(&filter, now).await?;
            for row in &page.keys {
                *stuck.entry(row.operation.clone()).or_default() += 1;
            }
            match page.next {
                Some(next) => filter = filter.after(Some(next)),
                None => break,
            }
        }
        let mut reported = STUCK_REPORTED
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut gauges = stuck.clone();
        for operation in reported.iter() {
            gauges.entry(operation.clone()).or_default();
        }
        for (operation, n) in gauges {
            telemetry::stuck_keys(&operation, n);
            reported.insert(operation);
        }
        Ok(stuck)
    }
}
