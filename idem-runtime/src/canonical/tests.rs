//! The canonical form's tests: RFC 8785's examples, the data model, exclusion, a pinned
//! vector, and properties against an independent writer.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::scalars::{NUMBER_TOKEN, cmp_utf16};
use super::*;

fn canon<T: Serialize + ?Sized>(value: &T) -> String {
    String::from_utf8(to_vec(value).unwrap()).unwrap()
}

fn without<T: Serialize + ?Sized>(value: &T, paths: &[&str]) -> String {
    let mut out = Vec::new();
    write(value, &Exclude::new(paths), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn error<T: Serialize + ?Sized>(value: &T) -> String {
    to_vec(value).unwrap_err().to_string()
}

/// `got => expected` pairs.
macro_rules! check {
    ($($got:expr => $expected:expr),+ $(,)?) => {$(
        assert_eq!($got, $expected, "{}", stringify!($got));
    )+};
}

#[test]
#[allow(clippy::excessive_precision, reason = "the literal of RFC 8785")]
fn rfc8785_examples() {
    // §3.2.2, with Rust literals: serde_json's parser may misround 333333333.33333329.
    let value = json!({
        "numbers": [333_333_333.333_333_29, 1E30, 4.50, 2e-3, 0.000_000_000_000_000_000_000_000_001],
        "string": "\u{20ac}$\u{f}\nA'B\"\\\\\"/",
        "literals": [null, true, false]
    });
    // §3.2.3: names compared as UTF-16 code units, so U+1F600 (D83D DE00) precedes U+FB33.
    let sorting = json!({"\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Dalet",
        "1": "One", "\u{1f600}": "Grinning Face", "\u{80}": "Control", "\u{f6}": "O Diaeresis"});
    check! {
        canon(&value) => r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#,
        canon(&sorting) => "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"O Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Grinning Face\",\"\u{fb33}\":\"Dalet\"}",
    }
}

#[test]
fn rfc8785_numbers() {
    // Appendix B: IEEE 754 bits and their text.
    let f = f64::from_bits;
    check! {
        canon(&f(0x0000_0000_0000_0000)) => "0",
        canon(&f(0x8000_0000_0000_0000)) => "0",
        canon(&f(0x0000_0000_0000_0001)) => "5e-324",
        canon(&f(0x8000_0000_0000_0001)) => "-5e-324",
        canon(&f(0x7fef_ffff_ffff_ffff)) => "1.7976931348623157e+308",
        canon(&f(0xffef_ffff_ffff_ffff)) => "-1.7976931348623157e+308",
        canon(&f(0x4340_0000_0000_0000)) => "9007199254740992",
        canon(&f(0xc340_0000_0000_0000)) => "-9007199254740992",
        canon(&f(0x4430_0000_0000_0000)) => "295147905179352830000",
        canon(&f(0x44b5_2d02_c7e1_4af5)) => "9.999999999999997e+22",
        canon(&f(0x44b5_2d02_c7e1_4af6)) => "1e+23",
        canon(&f(0x44b5_2d02_c7e1_4af7)) => "1.0000000000000001e+23",
        canon(&f(0x444b_1ae4_d6e2_ef4e)) => "999999999999999700000",
        canon(&f(0x444b_1ae4_d6e2_ef50)) => "1e+21",
        canon(&f(0x3eb0_c6f7_a0b5_ed8c)) => "9.999999999999997e-7",
        canon(&f(0x3eb0_c6f7_a0b5_ed8d)) => "0.000001",
        canon(&f(0x41b3_de43_5555_5553)) => "333333333.3333332",
        canon(&f(0x41b3_de43_5555_5554)) => "333333333.33333325",
        canon(&f(0x41b3_de43_5555_5555)) => "333333333.3333333",
        canon(&f(0x41b3_de43_5555_5557)) => "333333333.33333343",
        canon(&f(0xbecb_f647_612f_3696)) => "-0.0000033333333333333333",
        canon(&f(0x4314_3ff3_c1cb_0959)) => "1424953923781206.2",
        canon(&(1.0, -1.5, 0.1, 4.5, 0.002, 1e20, 1e-7, 1e-27)) => "[1,-1.5,0.1,4.5,0.002,100000000000000000000,1e-7,1e-27]",
        // f32 is widened to f64 first.
        canon(&(0.1_f32, 1.5_f32, -0.0_f32)) => "[0.10000000149011612,1.5,0]",
        // Integers are exact at any width.
        canon(&(9_007_199_254_740_993_u64, u64::MAX, i64::MIN)) => "[9007199254740993,18446744073709551615,-9223372036854775808]",
        canon(&(0_u8, -7_i8, -300_i16, 70_000_u32, u128::MAX, i128::MIN)) => "[0,-7,-300,70000,340282366920938463463374607431768211455,-170141183460469231731687303715884105728]",
    }
}

#[test]
fn strings_are_escaped_canonically() {
    let controls: String = (0_u8..0x20).map(char::from).collect();
    let mut out = Vec::new();
    write_str("x\ny", &mut out);
    check! {
        canon(&controls) => r#""\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f""#,
        canon("a\"b\\c/d\u{7f}é€😀") => "\"a\\\"b\\\\c/d\u{7f}é€😀\"",
        canon(&['"', 'é']) => r#"["\"","é"]"#,
        out => b"\"x\\ny\"",
    }
}

#[derive(Serialize)]
struct Order<'a> {
    sku: &'a str,
    qty: u32,
    note: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tags: Vec<&'a str>,
    to: Address,
}

#[derive(Serialize)]
struct Reordered<'a> {
    to: Address,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tags: Vec<&'a str>,
    note: Option<&'a str>,
    qty: u32,
    sku: &'a str,
}

#[derive(Serialize)]
struct Address {
    zip: u32,
    city: &'static str,
}

#[derive(Serialize)]
struct Flat {
    z: u8,
    #[serde(flatten)]
    inner: Address,
    #[serde(flatten)]
    extra: BTreeMap<&'static str, u8>,
    a: u8,
}

#[test]
fn objects_are_sorted() {
    let value: Value =
        serde_json::from_str(r#"{"b":{"y":1,"x":[{"d":1,"c":2}]},"a":"s"}"#).unwrap();
    let (sku, to, t) = (
        "A-1",
        || Address {
            zip: 75001,
            city: "P",
        },
        || vec!["t"],
    );
    let (extra, inner) = ([("m", 3), ("a", 9)].into(), Address { zip: 1, city: "c" });
    let hash: HashMap<String, u32> = (0..500).map(|i| (format!("k{i}"), i)).collect();
    let btree: BTreeMap<_, _> = hash.clone().into_iter().collect();
    let expected = r#"{"note":null,"qty":2,"sku":"A-1","to":{"city":"P","zip":75001}}"#;
    check! {
        canon(&value) => r#"{"a":"s","b":{"x":[{"c":2,"d":1}],"y":1}}"#,
        canon(&Order { sku, qty: 2, note: None, tags: vec![], to: to() }) => expected,
        canon(&Reordered { to: to(), tags: vec![], note: None, qty: 2, sku }) => expected,
        canon(&Order { sku, qty: 2, note: Some("n"), tags: t(), to: to() }) => r#"{"note":"n","qty":2,"sku":"A-1","tags":["t"],"to":{"city":"P","zip":75001}}"#,
        canon(&Reordered { to: to(), tags: t(), note: Some("n"), qty: 2, sku }) => r#"{"note":"n","qty":2,"sku":"A-1","tags":["t"],"to":{"city":"P","zip":75001}}"#,
        // Two members "a" (flatten): both kept, in the order serde emitted them.
        canon(&Flat { z: 1, inner, extra, a: 2 }) => r#"{"a":9,"a":2,"city":"c","m":3,"z":1,"zip":1}"#,
        to_vec(&hash).unwrap() => to_vec(&btree).unwrap(),
        // ASCII names: UTF-16 order is byte order, which serde_json's writer keeps here.
        to_vec(&hash).unwrap() => serde_json::to_vec(&btree).unwrap(),
    }
}

#[derive(Serialize)]
enum Shape {
    Unit,
    Newtype(u8),
    Tuple(u8, &'static str),
    Struct { y: u8, x: Option<u8> },
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum Tagged {
    Card { number: u16, cvc: u16 },
}

#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct Id(i64);

#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
enum Currency {
    Eur,
}

/// Serialises `serialize_bytes`, an error, or what `serde_json::Number` does under its
/// `arbitrary_precision` feature.
enum Odd {
    Bytes,
    Fails,
    Number(&'static str),
}

impl Serialize for Odd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Bytes => s.serialize_bytes(&[0, 7, 255]),
            Self::Fails => Err(serde::ser::Error::custom("no")),
            Self::Number(text) => {
                let mut s = s.serialize_struct(NUMBER_TOKEN, 1)?;
                s.serialize_field(NUMBER_TOKEN, text)?;
                s.end()
            }
        }
    }
}

#[test]
fn data_model() {
    let named = BTreeMap::from([(Currency::Eur, BTreeMap::from([(Id(-3), ())]))]);
    check! {
        canon(&[Shape::Unit, Shape::Newtype(3), Shape::Tuple(1, "a"), Shape::Struct { y: 1, x: None }])
            => r#"["Unit",{"Newtype":3},{"Tuple":[1,"a"]},{"Struct":{"x":null,"y":1}}]"#,
        canon(&Tagged::Card { number: 4111, cvc: 123 }) => r#"{"cvc":123,"number":4111,"type":"Card"}"#,
        canon(&((), Id(4), Some(Id(5)), None::<u8>, Odd::Bytes, [(); 0])) => "[null,4,5,null,[0,7,255],[]]",
        canon(&(BTreeMap::from([(2, true), (-1, false), (10, true)]), HashMap::from([(true, 'a'), (false, 'b')])))
            => r#"[{"-1":false,"10":true,"2":true},{"false":"b","true":"a"}]"#,
        canon(&named) => r#"{"Eur":{"-3":null}}"#,
        canon(&BTreeMap::from([('\n', u128::MAX)])) => r#"{"\n":340282366920938463463374607431768211455}"#,
        canon(&["123456789012345678901234567890", "-0", "-12", "2.50", "1E30", "1e-7"].map(Odd::Number)) => "[123456789012345678901234567890,0,-12,2.5,1e+30,1e-7]",
        error(&Odd::Number("1e999")) => "a number is not finite (inf) and has no JSON form",
        error(&Odd::Number("x")) => "a serde_json number that is not a number",
        error(&[f64::NAN]) => "a number is not finite (NaN) and has no JSON form",
        error(&f32::NEG_INFINITY) => "a number is not finite (-inf) and has no JSON form",
        error(&(json!({"a": 1}), [Odd::Fails])) => "no",
        error(&BTreeMap::from([((1, 2), 3)])) => "a map key must be a string, an integer, a bool or a char, not a tuple",
        error(&[BTreeMap::from([(None::<u8>, 1)])]) => "a map key must be a string, an integer, a bool or a char, not an option",
    }
}

#[derive(Serialize)]
struct Payment {
    amount: u64,
    method: Method,
    trace: f64,
}

#[derive(Serialize)]
enum Method {
    Card { number: u16, holder: &'static str },
}

#[test]
fn exclusion() {
    let v = json!({"b": {"s": "A", "m": {"n": "x", "k": 1}, "z": [{"n": 1}]}, "a": 0});
    let all = canon(&v);
    let p = Payment {
        amount: 5,
        method: Method::Card {
            number: 4111,
            holder: "Ann",
        },
        trace: f64::NAN,
    };
    check! {
        without(&v, &["b.m.n"]) => r#"{"a":0,"b":{"m":{"k":1},"s":"A","z":[{"n":1}]}}"#,
        without(&v, &["b.s", "a"]) => r#"{"b":{"m":{"k":1,"n":"x"},"z":[{"n":1}]}}"#,
        without(&v, &["b.m"]) => r#"{"a":0,"b":{"s":"A","z":[{"n":1}]}}"#,
        // Missing paths, paths into arrays, prefixes of names: nothing is left out.
        without(&v, &["b.nope.x", "b.z.n", "b.z.0.n", "b.m.n.x", "b.", "b..s", "", "."]) => all,
        // An excluded value is never serialised (a NaN would be an error).
        without(&p, &["trace", "method.Card.number"]) => r#"{"amount":5,"method":{"Card":{"holder":"Ann"}}}"#,
        without(&p, &["trace", "method.Card"]) => r#"{"amount":5,"method":{}}"#,
        without(&Shape::Newtype(1), &["Newtype"]) => "{}",
        without(&Shape::Tuple(1, "a"), &["Tuple"]) => "{}",
        without(&[Shape::Tuple(1, "a")], &["Tuple"]) => r#"[{"Tuple":[1,"a"]}]"#,
    }
}

#[test]
fn pinned_vector() {
    // Pinned: a change of the canonical form silently turns every retry into a 422.
    let value = json!({
        "lines": [{"sku": "A-1", "qty": 2}, {"sku": "\u{e9}\t\u{1f600}", "qty": 1}],
        "customer": {"vip": null, "name": "Zoë", "id": 18_446_744_073_709_551_615_u64},
        "total": 12_345,
        "discount": 0.25
    });
    let mut hasher = Sha256::new();
    write(&value, &Exclude::NONE, &mut hasher).unwrap();
    let digest = hasher.finalize();
    let digest = crate::hex::encode(&digest);
    check! {
        canon(&value) => "{\"customer\":{\"id\":18446744073709551615,\"name\":\"Zoë\",\"vip\":null},\"discount\":0.25,\"lines\":[{\"qty\":2,\"sku\":\"A-1\"},{\"qty\":1,\"sku\":\"é\\t😀\"}],\"total\":12345}",
        digest => "9413767d0ec48ba3d31a7f368ca4b14724f11316026ed706d046cf4ed8e1c401",
    }
}

fn text() -> impl Strategy<Value = String> {
    let special: Vec<char> = "\"\\/aé\u{7f}\u{e000}\u{ffff}\u{10000}😀".chars().collect();
    let controls = (0_u8..0x20).prop_map(char::from);
    let c = prop_oneof![any::<char>(), controls, prop::sample::select(special)];
    prop::collection::vec(c, 0..6).prop_map(String::from_iter)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        let members = prop::collection::vec((text(), inner.clone()), 0..6);
        prop_oneof![
            prop::collection::vec(inner, 0..6).prop_map(Value::Array),
            members.prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An independent writer of the canonical form, for integer-only values.
fn reference(value: &Value) -> String {
    let join = |items: Vec<String>| items.join(",");
    match value {
        Value::Array(items) => format!("[{}]", join(items.iter().map(reference).collect())),
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            let text = |(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), reference(v));
            format!("{{{}}}", join(members.into_iter().map(text).collect()))
        }
        _ => serde_json::to_string(value).unwrap(),
    }
}

proptest! {
    #[test]
    fn canonical_form_is_a_fixed_point(value in json_value()) {
        let once = to_vec(&value).unwrap();
        prop_assert_eq!(String::from_utf8(once.clone()).unwrap(), reference(&value));
        let parsed: Value = serde_json::from_slice(&once).unwrap();
        prop_assert_eq!(&parsed, &value);
        prop_assert_eq!(to_vec(&parsed).unwrap(), once);
    }

    #[test]
    fn names_sort_as_utf16(a in text(), b in text()) {
        let utf16 = a.encode_utf16().cmp(b.encode_utf16());
        prop_assert_eq!(cmp_utf16(a.as_bytes(), b.as_bytes()), utf16);
    }
}
