//! Micro-benchmarks of the per-request work that is not SQL: key parsing, canonical
//! fingerprinting (a small and a 16 KiB body) and turning a 16 KiB record into a response.
//!
//! `cargo bench -p idem-runtime --bench micro`

use std::hint::black_box;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use criterion::{Criterion, criterion_group, criterion_main};
use idem_runtime::IdempotencyKey;
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::key::KeyFormat;
use idem_runtime::protocol::Record;
use idem_runtime::spec::OperationSpec;
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

/// The canonical input of a handler whose only input is a JSON body: `{"body": …}`.
#[derive(Serialize)]
struct BodyInput<'a, T> {
    body: &'a T,
}

const SPEC: OperationSpec = OperationSpec::new("create_order:v1");

fn big_order() -> BigOrder {
    BigOrder {
        customer: "acme".into(),
        lines: (0..179)
            .map(|i| Line {
                sku: format!("SKU-{i:05}"),
                quantity: i % 20 + 1,
                note: "n".repeat(48),
            })
            .collect(),
    }
}

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
    let small = NewOrder {
        sku: "BOOK-1".into(),
        quantity: 2,
    };
    let big = big_order();
    let size = serde_json::to_vec(&big).map(|v| v.len()).unwrap_or(0);
    assert!((16_000..17_000).contains(&size), "big body is {size} bytes");
    c.bench_function("fingerprint/small", |b| {
        b.iter(|| {
            Fingerprint::of(
                SPEC.id,
                &BodyInput {
                    body: black_box(&small),
                },
                &[],
            )
        })
    });
    c.bench_function("fingerprint/16KiB", |b| {
        b.iter(|| {
            Fingerprint::of(
                SPEC.id,
                &BodyInput {
                    body: black_box(&big),
                },
                &[],
            )
        })
    });
}

fn responses(c: &mut Criterion) {
    let big = big_order();
    let mut record = Record::json(StatusCode::CREATED, &big).expect("a JSON record");
    record.headers.insert(
        header::LOCATION,
        HeaderValue::from_static("/orders/5c44cb1d-0c8d-4f11-a8fe-ce51b3c10798"),
    );
    assert!(
        (16_000..17_000).contains(&record.body.len()),
        "big record is {} bytes",
        record.body.len()
    );
    c.bench_function("record/201-16KiB-into-response", |b| {
        b.iter(|| black_box(record.clone()).into_response())
    });
}

criterion_group!(benches, keys, fingerprints, responses);
criterion_main!(benches);
