//! Unit tests of the timeline exporter: number formatting, phases that tile a request's
//! life, step counters, and the file's shape on a small run.

use super::*;

#[test]
fn microseconds_have_exactly_three_decimals() {
    let mut buf = Vec::new();
    for ns in [0, 1, 999, 1000, 1_234_567, u64::MAX] {
        push_us(&mut buf, ns);
        buf.push(b' ');
    }
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(
        text,
        "0.000 0.001 0.999 1.000 1234.567 18446744073709551.615 "
    );
}
