//! Stand-ins for store methods that land with the operations registry; removed at the merge.

use idem_store::StoreError;

use crate::db::Db;

impl Db {
    /// How many keys a sweep before `before_ms` would delete (stand-in).
    pub async fn count_sweepable(&self, before_ms: i64) -> Result<u64, StoreError> {
        let _ = before_ms;
        Ok(0)
    }
}
