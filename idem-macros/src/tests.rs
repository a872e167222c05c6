//! The expansion, outside the compiler: what is emitted for valid and invalid input.

use proc_macro2::TokenStream;
use quote::quote;

use crate::expand::expand;

fn expanded(args: TokenStream, item: TokenStream) -> String {
    expand(args, item).to_string()
}

#[test]
fn every_extractor_goes_through_input_unless_marked() {
    let out = expanded(
        quote!(scope = "global"),
        quote! {
            async fn h(#[not_input] headers: HeaderMap, tx: &mut Transaction<'_, Sqlite>, body: AppJson<T>) {}
        },
    );
    assert!(out.contains("input :: < AppJson < T > >"), "{out}");
    assert!(!out.contains("input :: < HeaderMap >"), "{out}");
    // The marker is consumed, not left for the compiler to reject.
    assert!(!out.contains("not_input"), "{out}");
    // Every extractor is taken through `Reuse`; the last through `Last`, whose refusal goes
    // to `refused` (the key's answer may come first).
    assert!(out.contains("Reuse < HeaderMap >"), "{out}");
    assert!(out.contains("Last < AppJson < T > >"), "{out}");
    assert!(
        out.contains("refused (__idem_ctx , & __IDEM_SPEC , refusal)"),
        "{out}"
    );
}

#[test]
fn only_extractors_before_the_last_are_checked_for_bodies() {
    let out = expanded(
        quote!(scope = "global"),
        quote! {
            async fn h(a: Path<u32>, tx: &mut Transaction<'_, Sqlite>, b: Query<Q>, c: JsonBody<B>) {}
        },
    );
    assert!(out.contains("not_body :: < Path < u32 > >"), "{out}");
    assert!(out.contains("not_body :: < Query < Q > >"), "{out}");
    assert!(!out.contains("not_body :: < JsonBody < B > >"), "{out}");
}

#[test]
fn state_checks_only_when_named() {
    let item = quote!(
        async fn h(tx: &mut Transaction<'_, Sqlite>, b: JsonBody<B>) {}
    );
    let without = expanded(quote!(scope = "global"), item.clone());
    assert!(!without.contains("last_extractor"), "{without}");
    let with = expanded(quote!(scope = "global", state = AppState), item);
    assert!(with.contains("state :: < AppState ,"), "{with}");
    assert!(
        with.contains("Extractor :: < JsonBody < B > , AppState > :: NEW . last_extractor ()"),
        "{with}"
    );
    assert!(!with.contains("resumable"), "{with}");
}

#[test]
fn a_staged_state_is_checked_for_a_principal_to_store() {
    let item = quote!(
        async fn h(attempt: Attempt<Sqlite>) -> Result<Finished, StepError> {}
    );
    let without = expanded(quote!(scope = "tenant", mode = "staged"), item.clone());
    assert!(!without.contains("resumable"), "{without}");
    let with = expanded(
        quote!(scope = "tenant", mode = "staged", state = AppState),
        item,
    );
    assert!(with.contains("resumable :: < AppState ,"), "{with}");
}

#[test]
fn invalid_arguments_give_one_error_and_a_routable_stub() {
    let out = expanded(
        quote!(scope = "tenants", ttl = "24h"),
        quote! {
            /// Docs stay.
            pub async fn create<DB: Db>(tx: &mut Transaction<'_, DB>, body: JsonBody<B>) -> Response {}
        },
    );
    assert_eq!(out.matches("compile_error").count(), 1, "{out}");
    assert!(out.contains("unknown scope `tenants`"), "{out}");
    // The stub: same name, visibility and generics, no arguments, so `.route(…)` compiles.
    assert!(out.contains("pub async fn create < DB : Db > ()"), "{out}");
    assert!(out.contains("Docs stay."), "{out}");
    // The handler stays, nested and unused, so its imports are used and its body checked,
    // but nothing calls it.
    assert!(out.contains("async fn __idem_unused"), "{out}");
    assert!(!out.contains("Reuse") && !out.contains("Last"), "{out}");
}

#[test]
fn the_spec_and_the_rustdoc_come_from_the_arguments() {
    let out = expanded(
        quote!(
            scope = "tenant",
            ttl = "7d",
            operation = "POST /orders",
            version = 2,
            on_expired = "reexecute"
        ),
        quote!(
            async fn h(tx: &mut Transaction<'_, Sqlite>) {}
        ),
    );
    assert!(
        out.contains("OperationSpec :: new (\"POST /orders:v2\")"),
        "{out}"
    );
    assert!(out.contains("from_secs (604800u64)"), "{out}");
    assert!(out.contains("ExpiryPolicy :: Reexecute"), "{out}");
    assert!(out.contains("TenantScope"), "{out}");
    assert!(out.contains("# Idempotency"), "{out}");
    assert!(
        out.contains("Keys are unique per tenant and kept for 7 days"),
        "{out}"
    );
}

#[test]
fn the_handler_registers_its_route_and_documents_its_statuses() {
    let out = expanded(
        quote!(
            scope = "global",
            on_expired = "reexecute",
            path = "POST /orders"
        ),
        quote!(
            async fn create(tx: &mut Transaction<'_, Sqlite>) {}
        ),
    );
    assert!(out.contains("inventory :: submit !"), "{out}");
    assert!(out.contains("Some (\"POST\")"), "{out}");
    assert!(out.contains("Some (\"/orders\")"), "{out}");
    assert!(out.contains("handler : \"create\""), "{out}");
    // The id does not change with the route: stored keys keep matching.
    assert!(
        out.contains("OperationSpec :: new (\"create:v1\")"),
        "{out}"
    );
    assert!(out.contains("(`POST /orders`)"), "{out}");
    assert!(out.contains("`409`"), "{out}");
    assert!(!out.contains("`410`"), "reexecute: {out}");
}

#[test]
fn without_state_a_state_argument_is_probed_for_the_checks() {
    let staged = expanded(
        quote!(scope = "global", mode = "staged"),
        quote!(
            async fn h(
                State(prices): State<Prices>,
                axum::extract::State(s): axum::extract::State<AppState<DB>>,
                attempt: Attempt<DB>,
                body: JsonBody<B>,
            ) -> Result<Finished, StepError> {
            }
        ),
    );
    // Each `State<T>` is probed; whether `T` is the router's state is the compiler's to say.
    assert!(staged.contains("StateArg :: < Prices ,"), "{staged}");
    assert!(
        staged.contains("StateArg :: < AppState < DB > ,"),
        "{staged}"
    );
    assert!(staged.contains("__idem_state . resumable ()"), "{staged}");
    assert!(
        staged.contains("__idem_state . extractor :: < JsonBody < B > > () . last_extractor ()"),
        "{staged}"
    );
    assert!(
        staged.contains("__idem_state . extractor :: < State < Prices > > () . parts_extractor ()"),
        "{staged}"
    );

    let atomic = expanded(
        quote!(scope = "global"),
        quote!(
            async fn h(State(s): State<AppState>, tx: &mut Transaction<'_, Sqlite>) {}
        ),
    );
    assert!(atomic.contains("StateArg :: < AppState ,"), "{atomic}");
    assert!(!atomic.contains("resumable"), "{atomic}");

    // Named, the state is checked as named, and the arguments are not probed.
    let named = expanded(
        quote!(scope = "global", state = AppState),
        quote!(
            async fn h(State(s): State<AppState>, tx: &mut Transaction<'_, Sqlite>) {}
        ),
    );
    assert!(!named.contains("StateArg"), "{named}");
    assert!(named.contains("state :: < AppState ,"), "{named}");
}

#[test]
fn a_verified_extractor_is_registered_for_the_documents() {
    let item = |ty: TokenStream| {
        quote!(
            async fn h(tx: &mut Transaction<'_, Sqlite>, event: #ty) {}
        )
    };
    let args = quote!(scope = "global", key = header("webhook-id"));
    let verified = expanded(
        args.clone(),
        item(quote!(idem_runtime::webhooks::Verified<JsonBody<E>>)),
    );
    assert!(verified.contains("verified_webhook : true"), "{verified}");
    // The rustdoc lists the 401 of a delivery that does not verify.
    assert!(verified.contains("`401`"), "{verified}");
    let plain = expanded(args, item(quote!(JsonBody<E>)));
    assert!(plain.contains("verified_webhook : false"), "{plain}");
    assert!(!plain.contains("`401`"), "{plain}");
}

#[test]
fn declared_problems_are_registered_and_documented() {
    let out = expanded(
        quote!(
            scope = "global",
            path = "PUT /orders/{id}",
            problems = [
                problem(409, "urn:example:version-conflict", "version conflict"),
                problem(
                    503,
                    "urn:example:stock-down",
                    "stock service down",
                    retry_after
                ),
            ]
        ),
        quote!(
            async fn update(tx: &mut Transaction<'_, Sqlite>) {}
        ),
    );
    assert_eq!(out.matches("compile_error").count(), 0, "{out}");
    assert!(
        out.contains(
            "AnnotatedProblem { status : 409u16 , type_uri : \"urn:example:version-conflict\" , \
             title : \"version conflict\" , retry_after : false , }"
        ),
        "{out}"
    );
    assert!(
        out.contains("type_uri : \"urn:example:stock-down\" , title : \"stock service down\" , retry_after : true"),
        "{out}"
    );
    // The rustdoc lists their statuses.
    assert!(out.contains("`503`"), "{out}");
}

#[test]
fn invalid_problems_are_reported_each_at_its_token() {
    let out = expanded(
        quote!(
            scope = "global",
            problems = [
                problem(200, "urn:example:a", "a"),
                problem(409, "", "b"),
                problem(409, "urn:example:c", "c"),
                problem(422, "urn:example:c", "c again"),
                problem(409, "urn:idem:problem:in-flight", "in flight"),
                problem(503, "urn:example:d", " ", later),
                problem(409),
            ]
        ),
        quote!(
            async fn update(tx: &mut Transaction<'_, Sqlite>) {}
        ),
    );
    for expected in [
        "invalid problem status `200`",
        "a problem's type is empty",
        "duplicate problem type `urn:example:c`",
        "is one of idem's own problem types",
        "a problem's title is empty",
        "a problem takes only `retry_after`",
        "`problems` takes a list of the operation's own problems",
    ] {
        assert!(out.contains(expected), "{expected}: {out}");
    }
    assert!(!out.contains("AnnotatedProblem"), "{out}");
}

#[test]
fn the_last_extractor_is_probed_for_its_body_unless_generic() {
    let probe = |item: TokenStream| {
        let out = expanded(quote!(scope = "global"), item);
        assert_eq!(out.matches("compile_error").count(), 0, "{out}");
        out
    };
    let concrete = probe(quote!(
        async fn h<DB: Db>(a: Path<u32>, tx: &mut Transaction<'_, DB>, b: Checked<NewOrder>) {}
    ));
    assert!(
        concrete.contains("BodyProbe :: < Checked < NewOrder > > :: NEW) . request_body ()"),
        "{concrete}"
    );
    assert!(!concrete.contains("BodyProbe :: < Path"), "{concrete}");
    for generic in [
        quote!(
            async fn h<T>(tx: &mut Transaction<'_, Sqlite>, b: JsonBody<T>) {}
        ),
        quote!(
            async fn h<'a>(tx: &mut Transaction<'a, Sqlite>, b: Body<'a>) {}
        ),
        quote!(
            async fn h(tx: &mut Transaction<'_, Sqlite>, b: impl Extractor) {}
        ),
        quote!(
            async fn h(tx: &mut Transaction<'_, Sqlite>) {}
        ),
    ] {
        let out = probe(generic);
        assert!(!out.contains("BodyProbe"), "{out}");
        assert!(
            out.contains("request_body : || :: core :: option :: Option :: None"),
            "{out}"
        );
    }
}
