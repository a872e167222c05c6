//! Hexadecimal, lowercase: the one encoder of the runtime.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hexadecimal.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The bytes of hexadecimal `text` (either case); `None` for an odd length or a non-digit.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let bytes = [0x00, 0x7f, 0xff, 0x10];
        assert_eq!(super::encode(&bytes), "007fff10");
        assert_eq!(super::decode("007FFF10").as_deref(), Some(&bytes[..]));
        assert_eq!(super::decode("0"), None);
        assert_eq!(super::decode("zz"), None);
    }
}
