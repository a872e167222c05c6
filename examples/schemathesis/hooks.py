"""schemathesis hooks for the examples: the tester behaves as a client of idem should.

A client sends a new `Idempotency-Key` for each new request and the same key for every retry
of it. A generated key cannot know that: schemathesis draws short keys again and again ("0",
"A"), and the second request under a key with another body is refused 422 (`key-reused`),
as the contract says it must be. No schema can say that a key must be fresh, so, for the
requests the tester means to be valid (its positive cases), the key is made from the request
itself: the same request gets the same key (and the stored response, replayed), another
request another key. Invalid cases keep their generated keys, so the key's syntax is still
tested against the documents' pattern.

With `IDEM_SCHEMATHESIS_AMOUNT` set, every valid `POST /payments` asks for that amount: the
run script sets it to 402, the amount the fake provider always declines, for one run that
proves the tester takes the documented decline for what it is (`schemathesis.toml`).
"""

import hashlib
import json
import os
from collections.abc import MutableMapping

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    meta = case.meta
    if meta is not None and not meta.generation.mode.is_positive:
        return
    headers = case.headers
    if not isinstance(headers, MutableMapping):
        return
    name = next((n for n in headers if n.lower() == "idempotency-key"), None)
    if name is None:
        return
    amount = os.environ.get("IDEM_SCHEMATHESIS_AMOUNT")
    forced = case.method == "POST" and case.formatted_path == "/payments"
    if amount is not None and forced and isinstance(case.body, MutableMapping):
        case.body["amount"] = int(amount)
    request = [case.method, case.formatted_path, case.query, case.body]
    digest = hashlib.sha256(
        json.dumps(request, sort_keys=True, default=repr).encode()
    ).hexdigest()
    headers[name] = f'"{digest}"'
