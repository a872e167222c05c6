//! The cases of the kit, one `async fn name<DB: ConformanceSql>()` each, generic over the
//! backend ([`ConformanceSql`](super::ConformanceSql)). Each gets a new database from the
//! test harness, and panics with a message naming what differed from the contract.

mod life;
mod migrations;
mod operator;
mod outbox;
mod protocol;
mod sealed_rows;
mod staged;
mod table;

pub use life::*;
pub use migrations::*;
pub use operator::*;
pub use outbox::*;
pub use protocol::*;
pub use sealed_rows::*;
pub use staged::*;
pub use table::*;
