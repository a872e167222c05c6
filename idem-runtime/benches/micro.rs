//! Micro-benchmarks of the per-request work that is not SQL: key parsing, canonical
//! fingerprinting (a small and a 16 KiB body) and response capture.
//!
//! `cargo bench -p idem-runtime --bench micro`

use std::hint::black_box;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use criterion::{Criterion, criterion_group, criterion_main};
use idem_runtime::__private::{OperationSpec, fingerprint};
use idem_runtime::{IdempotencyKey, KeyFormat, capture};
use serde::Serialize;

#[derive(Serialize)]
struct NewOrder {
    sku: String,
    quantity: i32,
}

#[derive(Serialize)]
struct Line {
    sku: String,
    quantity: i32,
    note: String,
}

#[derive(Serialize)]
struct BigOrder {
    customer: String,
    lines: Vec<Line>,
}

const SPEC: OperationSpec = OperationSpec::new("create_order:v1");

fn keys(c: &mut Criterion) {
    let quoted = b"\"8e03978e-40d5-43e8-bc93-6894a57f9324\"";
    let bare = b"8e03978e-40d5-43e8-bc93-6894a57f9324";
    c.bench_function("key/quoted", |b| {
        b.iter(|| IdempotencyKey::parse(black_box(quoted), KeyFormat::Lenient))
    });
    c.bench_function("key/bare", |b| {
        b.iter(|| IdempotencyKey::parse(black_box(bare), KeyFormat::Lenient))
    });
}

fn fingerprints(c: &mut Criterion) {
    let small = axum::Json(NewOrder {
        sku: "BOOK-1".into(),
        quantity: 2,
    });
    let big = axum::Json(BigOrder {
        customer: "acme".into(),
        lines: (0..179)
            .map(|i| Line {
                sku: format!("SKU-{i:05}"),
                quantity: i % 20 + 1,
                note: "n".repeat(48),
            })
            .collect(),
    });
    let size = serde_json::to_vec(&big.0).map(|v| v.len()).unwrap_or(0);
    assert!((16_000..17_000).contains(&size), "big body is {size} bytes");
    c.bench_function("fingerprint/small", |b| {
        b.iter(|| fingerprint(&SPEC, &[black_box(&small)]))
    });
    c.bench_function("fingerprint/16KiB", |b| {
        b.iter(|| fingerprint(&SPEC, &[black_box(&big)]))
    });
}

fn captures(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let body = r#"{"id":"5c44cb1d-0c8d-4f11-a8fe-ce51b3c10798","sku":"BOOK-1","quantity":2}"#;
    c.bench_function("capture/201-json", |b| {
        b.iter(|| {
            let response = (
                StatusCode::CREATED,
                [
                    (
                        header::LOCATION,
                        "/orders/5c44cb1d-0c8d-4f11-a8fe-ce51b3c10798",
                    ),
                    (header::CONTENT_TYPE, "application/json"),
                ],
                body,
            )
                .into_response();
            runtime.block_on(capture(response, 1 << 20))
        })
    });
}

criterion_group!(benches, keys, fingerprints, captures);
criterion_main!(benches);
