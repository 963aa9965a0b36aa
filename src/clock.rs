//! Time as the service sees it: integer microseconds since the Unix epoch, and
//! their ISO 8601 rendering.

use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime, PrimitiveDateTime, Time};

pub fn now_micros() -> i64 {
    let now = OffsetDateTime::now_utc();
    (now.unix_timestamp_nanos() / 1_000) as i64
}

/// `2026-11-22T04:07:28.123456Z`.
pub fn iso(micros: i64) -> String {
    let dt = OffsetDateTime::from_unix_timestamp_nanos(micros as i128 * 1_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    dt.format(&fmt)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".into())
}

pub fn iso_opt(micros: Option<i64>) -> Option<String> {
    micros.map(iso)
}

/// The last instant a list's `until` admits: a timestamp as given, a date
/// (`2026-11-22`) to the end of that day, UTC — `until=2026-01-31` includes
/// mail of the 31st, as `since=2026-01-01` includes mail of the 1st.
pub fn parse_until(s: &str) -> Option<i64> {
    parse_timestamp(s).or_else(|| parse_date(s).map(|midnight| midnight + 24 * 3_600_000_000 - 1))
}

/// Accepts a date (`2026-11-22`, midnight UTC) or a full RFC 3339 timestamp.
pub fn parse_instant(s: &str) -> Option<i64> {
    parse_timestamp(s).or_else(|| parse_date(s))
}

fn parse_timestamp(s: &str) -> Option<i64> {
    let dt = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    Some((dt.unix_timestamp_nanos() / 1_000) as i64)
}

/// Midnight UTC at the start of a date.
fn parse_date(s: &str) -> Option<i64> {
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    let date = Date::parse(s, &fmt).ok()?;
    let dt = PrimitiveDateTime::new(date, Time::MIDNIGHT).assume_utc();
    Some((dt.unix_timestamp_nanos() / 1_000) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips_through_parse() {
        let t = 1_795_000_000_123_456;
        assert_eq!(parse_instant(&iso(t)), Some(t));
        assert_eq!(parse_instant("2026-11-22"), Some(1_795_305_600_000_000));
        assert_eq!(
            parse_instant("2026-11-22T01:00:00+01:00"),
            Some(1_795_305_600_000_000)
        );
        assert_eq!(parse_instant("yesterday"), None);
        assert_eq!(parse_until("2026-11-22"), Some(1_795_391_999_999_999));
        assert_eq!(
            parse_until("2026-11-22T01:00:00+01:00"),
            Some(1_795_305_600_000_000)
        );
        assert_eq!(parse_until("2026-13-01"), None);
        assert_eq!(parse_instant("2026-13-01"), None);
    }
}
