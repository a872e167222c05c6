use axum::extract::Path;
use idem_runtime::idempotent;

#[idempotent(scope = "global")]
async fn create_order(Path(id): Path<u32>) -> String {
    id.to_string()
}

fn main() {}
