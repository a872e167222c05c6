//! Keeping the key table small: the sweep of expired keys.

use std::time::Duration;

use crate::clock::millis;
use crate::docs::OperationDoc;
use crate::protocol::Idem;
use crate::spec::{Mode, OperationSpec};
use crate::store::{Backend, Registration, StoreError};

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
    /// operation's own responses): typically every operation of the service,
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
            .map(|doc| Registration {
                operation: doc.id.clone(),
                scope: doc.scope.as_str().to_owned(),
                ttl_ms: millis(doc.ttl),
                mode: doc.mode.as_str().to_owned(),
                lease_ms: matches!(doc.mode, Mode::Staged).then(|| millis(doc.lease)),
                registered_at_ms: now,
                doc: serde_json::to_string(doc).ok(),
            })
            .collect();
        self.keys().register(&registrations).await
    }
}
