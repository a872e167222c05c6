//! How long to wait before the next attempt: exponential backoff with full jitter, and the
//! server's `Retry-After`.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::RETRY_AFTER;

/// How the backoff delay is spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// A uniformly random delay between zero and the exponential ceiling ("full jitter"):
    /// clients that failed together do not retry together. The default.
    #[default]
    Full,
    /// Exactly the exponential ceiling. Predictable; for tests and for a single client.
    None,
}

/// The exponential ceiling of the wait after the `failed`-th attempt (1-based):
/// `min(max, base * 2^(failed - 1))`, saturating instead of overflowing.
pub(crate) fn ceiling(base: Duration, max: Duration, failed: u32) -> Duration {
    let factor = 1u32
        .checked_shl(failed.saturating_sub(1))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(max).min(max)
}

/// The backoff delay after the `failed`-th attempt, jittered with `rng`.
pub(crate) fn backoff(
    base: Duration,
    max: Duration,
    failed: u32,
    jitter: Jitter,
    rng: &mut fastrand::Rng,
) -> Duration {
    let ceiling = ceiling(base, max, failed);
    match jitter {
        Jitter::None => ceiling,
        Jitter::Full => {
            let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rng.u64(0..=nanos))
        }
    }
}

/// The wait before the next attempt: the jittered backoff, but never less than what the
/// server asked for in `Retry-After`.
pub(crate) fn delay(backoff: Duration, retry_after: Option<Duration>) -> Duration {
    retry_after.map_or(backoff, |asked| asked.max(backoff))
}

/// The wall clock, for `Retry-After` dates: the one place this crate reads it.
#[allow(clippy::disallowed_methods)]
pub(crate) fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// The response's `Retry-After` (RFC 9110 §10.2.3) as a wait from `now`: delta-seconds or an
/// HTTP-date (a date in the past is no wait). `None` if the header is missing, repeated or
/// not one of the two forms.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let mut values = headers.get_all(RETRY_AFTER).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let text = value.to_str().ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // A number too large for u64 is still "much later": saturate.
        return Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use http::HeaderValue;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() {
        let base = 100 * MS;
        let max = 1000 * MS;
        let ceilings: Vec<_> = (1..=6).map(|n| ceiling(base, max, n)).collect();
        assert_eq!(
            ceilings,
            [100 * MS, 200 * MS, 400 * MS, 800 * MS, 1000 * MS, 1000 * MS]
        );
        // Far beyond the shift width or the multiplication's range: the cap, no overflow.
        assert_eq!(ceiling(base, max, 40), max);
        assert_eq!(ceiling(base, max, u32::MAX), max);
        assert_eq!(
            ceiling(Duration::MAX, Duration::from_secs(5), 3),
            Duration::from_secs(5)
        );
        // The zeroth attempt is treated as the first.
        assert_eq!(ceiling(base, max, 0), base);
    }

    #[test]
    fn full_jitter_stays_within_zero_and_the_ceiling_and_spreads() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut seen = Vec::new();
        for failed in 1..=5 {
            for _ in 0..200 {
                let d = backoff(100 * MS, 1000 * MS, failed, Jitter::Full, &mut rng);
                assert!(d <= ceiling(100 * MS, 1000 * MS, failed), "{d:?}");
                seen.push(d);
            }
        }
        // Spread over the whole range, not stuck at an end.
        assert!(seen.iter().any(|d| *d < 20 * MS));
        assert!(seen.iter().any(|d| *d > 900 * MS));
        // The same seed, the same delays.
        let mut a = fastrand::Rng::with_seed(42);
        let mut b = fastrand::Rng::with_seed(42);
        for failed in 1..=5 {
            assert_eq!(
                backoff(100 * MS, 1000 * MS, failed, Jitter::Full, &mut a),
                backoff(100 * MS, 1000 * MS, failed, Jitter::Full, &mut b)
            );
        }
    }

    #[test]
    fn no_jitter_is_the_ceiling() {
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            backoff(100 * MS, 1000 * MS, 3, Jitter::None, &mut rng),
            400 * MS
        );
    }

    #[test]
    fn retry_after_is_a_floor_under_the_backoff() {
        assert_eq!(delay(300 * MS, None), 300 * MS);
        assert_eq!(delay(300 * MS, Some(Duration::from_secs(1))), 1000 * MS);
        assert_eq!(delay(3000 * MS, Some(Duration::from_secs(1))), 3000 * MS);
        assert_eq!(delay(Duration::ZERO, Some(Duration::ZERO)), Duration::ZERO);
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_delta_seconds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            retry_after(&headers(&["1"]), now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&headers(&[" 120 "]), now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(retry_after(&headers(&["0"]), now), Some(Duration::ZERO));
        assert_eq!(
            retry_after(&headers(&["99999999999999999999999"]), now),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn retry_after_http_date() {
        // Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example, is 784111777 s after the epoch.
        let date = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let now = date - Duration::from_secs(90);
        assert_eq!(
            retry_after(&headers(&["Sun, 06 Nov 1994 08:49:37 GMT"]), now),
            Some(Duration::from_secs(90))
        );
        // The obsolete formats HTTP-date also allows.
        assert_eq!(
            retry_after(&headers(&["Sunday, 06-Nov-94 08:49:37 GMT"]), now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            retry_after(&headers(&["Sun Nov  6 08:49:37 1994"]), now),
            Some(Duration::from_secs(90))
        );
        // In the past: retry now.
        let later = date + Duration::from_secs(5);
        assert_eq!(
            retry_after(&headers(&["Sun, 06 Nov 1994 08:49:37 GMT"]), later),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_that_is_neither_form_is_ignored() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for bad in ["", "-1", "1.5", "soon", "1s", "Sun, 06 Nov 1994"] {
            assert_eq!(retry_after(&headers(&[bad]), now), None, "{bad:?}");
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
        // Two values: ambiguous, ignored.
        assert_eq!(retry_after(&headers(&["1", "2"]), now), None);
    }
}
