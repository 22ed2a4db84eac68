//! Timestamps on the wire: RFC 3339 in UTC to the second (`2026-11-30T09:00:00Z`), as a
//! session's `created_at` and the daemon's `started_at` are written, and read back.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, as RFC 3339.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `time` as RFC 3339 in UTC to the second. Sub-second parts are dropped, not rounded; a
/// time before 1970 (a clock gone wrong) is written as the epoch.
pub fn rfc3339(time: SystemTime) -> String {
    written(time, false)
}

/// `time` as RFC 3339 in UTC to the millisecond (`2026-11-30T09:00:00.123Z`): what the audit
/// log stamps its records with.
pub fn rfc3339_millis(time: SystemTime) -> String {
    written(time, true)
}

/// Both forms, the digits put in place: every audit record is stamped, and going through the
/// formatting machinery twice cost about as much as serializing the rest of the record.
fn written(time: SystemTime, with_millis: bool) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    let (days, in_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        // Past four digits (a clock gone far wrong): the year is written whole.
        let millis = with_millis.then(|| format!(".{:03}", since.subsec_millis()));
        return format!(
            "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}{}Z",
            in_day / 3600,
            in_day % 3600 / 60,
            in_day % 60,
            millis.unwrap_or_default()
        );
    }
    let mut text = *b"0000-00-00T00:00:00.000Z";
    put_digits(&mut text[0..4], year);
    put_digits(&mut text[5..7], month);
    put_digits(&mut text[8..10], day);
    put_digits(&mut text[11..13], in_day / 3600);
    put_digits(&mut text[14..16], in_day % 3600 / 60);
    put_digits(&mut text[17..19], in_day % 60);
    let length = if with_millis {
        put_digits(&mut text[20..23], u64::from(since.subsec_millis()));
        text.len()
    } else {
        text[19] = b'Z';
        20
    };
    text[..length]
        .iter()
        .map(|&digit| char::from(digit))
        .collect()
}

/// Writes `value`'s last `field.len()` decimal digits into `field`, zero-padded.
fn put_digits(field: &mut [u8], mut value: u64) {
    for place in field.iter_mut().rev() {
        *place = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Reads an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS`, an optional fraction, then `Z` or an
/// offset `±HH:MM`; `t`, `z` and a space in place of `T` are accepted as the RFC allows).
/// `None` for anything else, or for a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<u64> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|byte| byte.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let separated = bytes.get(4) == Some(&b'-')
        && bytes.get(7) == Some(&b'-')
        && matches!(bytes.get(10), Some(b'T' | b't' | b' '))
        && bytes.get(13) == Some(&b':')
        && bytes.get(16) == Some(&b':');
    if !separated {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        // 60 is a leap second.
        && second <= 60;
    if !valid || year < 1970 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        // Nanoseconds: the first nine digits count, the rest are below what is kept.
        let kept = &fraction[..digits.min(9)];
        nanos = kept.parse::<u32>().ok()? * 10u32.pow(9 - kept.len() as u32);
        rest = &fraction[digits..];
    }
    let offset_seconds: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let offset = rest.get(1..)?;
            if offset.len() != 5 || offset.as_bytes()[2] != b':' {
                return None;
            }
            let (hours, minutes): (i64, i64) = (
                offset
                    .get(..2)?
                    .parse()
                    .ok()
                    .filter(|h| (0..24).contains(h))?,
                offset
                    .get(3..)?
                    .parse()
                    .ok()
                    .filter(|m| (0..60).contains(m))?,
            );
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let utc = i64::try_from(local).ok()?.checked_sub(offset_seconds)?;
    let utc = u64::try_from(utc).ok()?;
    Some(UNIX_EPOCH + Duration::new(utc, nanos))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`,
/// on unsigned numbers since the days are never negative).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01, so that a leap day ends its (March-based) year.
    let days = days + 719_468;
    let era = days / 146_097;
    let day_of_era = days % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The days from 1970-01-01 to a date in 1970 or later (Howard Hinnant's `days_from_civil`,
/// the inverse of [`civil_from_days`]).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = year - u64::from(month <= 2);
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const CASES: [(u64, &str); 6] = [
        (0, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (946_684_799, "1999-12-31T23:59:59Z"),
        (1_735_689_599, "2024-12-31T23:59:59Z"),
        (1_796_029_200, "2026-11-30T09:00:00Z"),
        (4_107_542_400, "2100-03-01T00:00:00Z"),
    ];

    #[test]
    fn times_are_written_in_utc_to_the_second() {
        for (seconds, expected) in CASES {
            let time = UNIX_EPOCH + Duration::from_secs(seconds);
            assert_eq!(rfc3339(time), expected, "{seconds}");
        }
        let before_epoch = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(rfc3339(before_epoch), "1970-01-01T00:00:00Z");
        // Sub-second parts are dropped, not rounded.
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(59_999)),
            "1970-01-01T00:00:59Z"
        );
    }

    #[test]
    fn audit_stamps_have_milliseconds_and_far_years_are_whole() {
        let time = UNIX_EPOCH + Duration::from_millis(1_796_029_200_042);
        assert_eq!(rfc3339_millis(time), "2026-11-30T09:00:00.042Z");
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let far = UNIX_EPOCH + Duration::from_secs(253_402_300_800 + 3_723);
        assert_eq!(rfc3339(far), "10000-01-01T01:02:03Z");
        assert_eq!(rfc3339_millis(far), "10000-01-01T01:02:03.000Z");
    }

    #[test]
    fn what_is_written_reads_back() {
        for (seconds, text) in CASES {
            assert_eq!(
                parse_rfc3339(text),
                Some(UNIX_EPOCH + Duration::from_secs(seconds)),
                "{text}"
            );
        }
        // Every day of four years, leap days included.
        for day in 0..(4 * 366) {
            let time = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + day * 86_400 + 4321);
            assert_eq!(parse_rfc3339(&rfc3339(time)), Some(time));
        }
    }

    #[test]
    fn fractions_and_offsets_are_read() {
        let at = |seconds: u64, nanos: u32| Some(UNIX_EPOCH + Duration::new(seconds, nanos));
        let base = 1_796_029_200;
        assert_eq!(
            parse_rfc3339("2026-11-30T09:00:00.5Z"),
            at(base, 500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30t09:00:00.1234567891z"),
            at(base, 123_456_789)
        );
        assert_eq!(parse_rfc3339("2026-11-30T10:30:00+01:30"), at(base, 0));
        assert_eq!(parse_rfc3339("2026-11-30 04:00:00-05:00"), at(base, 0));
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            "2026-11-30",
            "2026-11-30T09:00:00",
            "2026-11-30T09:00:00+0100",
            "2026-11-30T09:00:00.Z",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-31T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T09:60:00Z",
            "2026-11-30T09:00:00ZZ",
            "+026-11-30T09:00:00Z",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:30:00+01:00",
            "２026-11-30T09:00:00Z",
            "2026-11-30T09:00:00+é:00",
            "2026-11-30T09:00:00+-1:00",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text}");
        }
    }
}
