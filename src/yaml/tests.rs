//! Tests of the tree, paths, sets and typed errors.

use super::*;

const TEXT: &str = "\
name: demo
router:
  policy_classes:
    - name: premium
      quantum: 512
    - {name: regular, quantum: 128}
  models:
    \"meta/llama-3.1\":
      policy_classes: []
workers:
  count: 1
  engine: {max_num_seqs: 4}
workload:
  groups: []
";

fn steps(path: &str) -> Vec<Step> {
    parse_path(path).unwrap()
}

fn set(pairs: &[(&str, &str)]) -> Result<Document, Error> {
    let mut doc = Document::parse(TEXT);
    for (path, value) in pairs {
        doc.set(path, value, &["policy_classes", "groups"])?;
    }
    Ok(doc)
}

#[test]
fn paths_address_list_entries_by_name_or_index() {
    let tree = Node::parse(TEXT).unwrap();
    let (node, found) = tree.walk(&steps("router.policy_classes.regular.quantum"));
    assert_eq!((found, node.scalar(), node.start.line), (4, Some("128"), 6));
    let (node, found) = tree.walk(&steps("router.policy_classes[0].quantum"));
    assert_eq!((found, node.scalar()), (4, Some("512")));
    assert_eq!(tree.walk(&steps("router.nope")).1, 1);
    let quoted = steps("router.models.\"meta/llama-3.1\".policy_classes");
    assert_eq!(tree.walk(&quoted).0.start.line, 9);
}

#[test]
fn path_at_names_keys_and_values() {
    let tree = Node::parse(TEXT).unwrap();
    assert_eq!(tree.path_at(5, 7), "router.policy_classes.premium.quantum");
    assert_eq!(tree.path_at(5, 16), "router.policy_classes.premium.quantum");
    assert_eq!(tree.path_at(6, 33), "router.policy_classes.regular.quantum");
    assert_eq!(tree.path_at(12, 20), "workers.engine.max_num_seqs");
    assert_eq!(tree.path_at(1, 1), "name");
}

#[test]
fn index_paths_become_name_paths() {
    let tree = Node::parse(TEXT).unwrap();
    let named = tree.name_path(&steps("router.policy_classes[1].quantum"));
    assert_eq!(named, "router.policy_classes.regular.quantum");
    let quoted = steps("router.models.\"meta/llama-3.1\"");
    assert_eq!(quoted[2], Step::Key("meta/llama-3.1".into()));
    assert_eq!(tree.name_path(&quoted), "router.models.\"meta/llama-3.1\"");
}

#[test]
fn path_parser_splits_keys_indexes_and_quoted_keys() {
    assert_eq!(
        parse_path("models.\"a.b\\\"c\".policy_classes[12].quantum"),
        Some(vec![
            Step::Key("models".into()),
            Step::Key("a.b\"c".into()),
            Step::Key("policy_classes".into()),
            Step::Index(12),
            Step::Key("quantum".into()),
        ])
    );
    assert_eq!(parse_path("a[x]"), None);
    assert_eq!(parse_path("a.\"unterminated"), None);
}

#[test]
fn byte_offsets_point_at_the_node() {
    let tree = Node::parse(TEXT).unwrap();
    let node = tree.walk(&steps("workers.count")).0;
    assert_eq!(&TEXT[node.start.byte..node.end.byte], "1");
    let map = tree.walk(&steps("workers.engine")).0;
    assert_eq!(&TEXT[map.start.byte..map.end.byte], "{max_num_seqs: 4}");
}

#[test]
fn empty_and_broken_texts_do_not_panic() {
    assert!(Node::parse("").is_none());
    let _ = Node::parse("a: [");
    let doc = Document::parse("");
    assert!(doc.error_at("a.b", "x").line.is_none());
}

#[test]
fn sets_replace_values_in_place_by_entry_name() {
    let doc = set(&[
        ("router.policy_classes.regular.quantum", "64"),
        ("router.policy_classes.premium.quantum", "1024"),
        ("workers.engine.max_num_seqs", "8"),
    ])
    .unwrap();
    assert!(doc.text().contains("{name: regular, quantum: 64}"));
    assert!(doc.text().contains("      quantum: 1024\n"));
    assert!(doc.text().contains("engine: {max_num_seqs: 8}"));
    assert_eq!(doc.text().lines().count(), TEXT.lines().count());
    assert_eq!(doc.origin(6, 1).set_by, Some(0));
    assert_eq!(doc.origin(5, 1).set_by, Some(1));
    assert_eq!(doc.origin(1, 1).set_by, None);
}

#[test]
fn sets_add_missing_keys_and_mappings_and_map_lines_back() {
    let doc = set(&[
        ("workers.dp_size", "2"),
        ("workers.engine.block_size", "16"),
        ("router.router_temperature", "0.5"),
        ("delays.arrival_jitter_ns", "1000"),
    ])
    .unwrap();
    let lines: Vec<&str> = doc.text().lines().collect();
    assert_eq!(lines[13], "  dp_size: 2");
    assert!(lines[12].contains("{max_num_seqs: 4, block_size: 16}"));
    assert_eq!(lines[9], "  router_temperature: 0.5");
    assert_eq!(lines[16], "delays: {arrival_jitter_ns: 1000}");
    let added = doc.origin(10, 1);
    assert_eq!((added.line, added.set_by), (None, Some(2)));
    // The original `workers:` line 10 is now line 11; `workload:` (13) is now 15.
    assert_eq!(doc.origin(11, 1).line, Some(10));
    assert_eq!(doc.origin(15, 1).line, Some(13));
    assert_eq!(doc.origin(14, 1).set_by, Some(0));
    let error = doc.error_at("delays.arrival_jitter_ns", "too late");
    assert_eq!(error.line, None);
    assert_eq!(error.field_path, "delays.arrival_jitter_ns");
    assert_eq!(
        error.message,
        "--set delays.arrival_jitter_ns=1000: too late"
    );
}

#[test]
fn sets_fill_empty_values_with_mappings() {
    let mut doc = Document::parse("name: x\ndelays:\nseed: 1\n");
    doc.set("delays.jitter_ms", "2", &[]).unwrap();
    assert_eq!(doc.text(), "name: x\ndelays: {jitter_ms: 2}\nseed: 1\n");
}

#[test]
fn bad_sets_are_errors_naming_the_path() {
    let error = set(&[("workers.count.x", "8")]).unwrap_err();
    assert_eq!(error.field_path, "workers.count.x");
    assert_eq!(error.line, Some(11));
    assert!(
        error.message.contains("`workers.count` is a single value"),
        "{error:?}"
    );
    let error = set(&[("router.policy_classes.gold.quantum", "8")]).unwrap_err();
    assert!(error.message.contains("no entry named `gold`"), "{error:?}");
    assert!(
        error.message.contains("cannot add list entries"),
        "{error:?}"
    );
    let error = set(&[("router.models.m.policy_classes.x.quantum", "8")]).unwrap_err();
    assert!(
        error
            .message
            .contains("`router.models.m.policy_classes` is a list"),
        "{error:?}"
    );
    let error = set(&[("router.policy_classes", "8")]).unwrap_err();
    assert!(error.message.contains("is a list"), "{error:?}");
    let error = set(&[("", "8")]).unwrap_err();
    assert!(error.message.contains("not a field path"), "{error:?}");
    let error = set(&[("a..b", "8")]).unwrap_err();
    assert!(error.message.contains("not a field path"), "{error:?}");
}

#[test]
fn values_cannot_change_the_structure() {
    let doc = set(&[("name", "x, y: {z}\"")]).unwrap();
    assert!(doc.text().starts_with("name: \"x, y: {z}\\\"\"\n"));
    assert!(set(&[("name", "a\nb: 1")]).is_err());
    assert_eq!(document::render_scalar("-1").unwrap(), "-1");
    assert_eq!(document::render_scalar("true").unwrap(), "true");
    assert_eq!(document::render_scalar("~").unwrap(), "~");
    assert_eq!(document::render_scalar("- 1").unwrap(), "\"- 1\"");
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "only parsed for its errors")]
struct Typed {
    name: String,
    #[serde(default)]
    order: Option<Order>,
    #[serde(default)]
    count: u64,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Order {
    Fifo,
    Lifo,
}

fn typed_error(text: &str) -> Error {
    Document::parse(text)
        .deserialize::<Typed>()
        .expect_err("invalid")
}

#[test]
fn typed_errors_name_line_path_and_value_in_words() {
    let error = typed_error("name: a\norder: newest\n");
    assert_eq!((error.line, error.field_path.as_str()), (Some(2), "order"));
    assert_eq!(
        error.message,
        "unknown value `newest`, expected one of fifo, lifo"
    );
    let error = typed_error("name: a\ncount: many\n");
    assert_eq!(error.field_path, "count");
    assert_eq!(error.message, "expected a whole number >= 0, got `many`");
    let error = typed_error("name: a\ncuont: 1\n");
    assert_eq!(
        (error.line, error.message.as_str()),
        (Some(2), "unknown field `cuont`")
    );
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code, reason = "only parsed for its errors")]
struct Small {
    #[serde(default)]
    limit: u32,
    #[serde(default)]
    level: i8,
}

#[test]
fn whole_numbers_beyond_their_type_name_the_largest_it_holds() {
    let error = typed_error("name: a\ncount: 1e29\n");
    assert_eq!(
        error.message,
        "`1e29` is more than 18446744073709551615 (2^64 - 1), the largest whole number this field can hold"
    );
    let error = typed_error("name: a\ncount: 18446744073709551616\n");
    assert!(
        error.message.contains("more than 18446744073709551615"),
        "{error}"
    );
    let small = |text: &str| Document::parse(text).deserialize::<Small>().unwrap_err();
    assert_eq!(
        small("limit: 5000000000\n").message,
        "`5000000000` is more than 4294967295, the largest whole number this field can hold"
    );
    assert_eq!(
        small("level: -200\n").message,
        "`-200` is less than -128, the smallest whole number this field can hold"
    );
    // What is not a number beyond the type keeps the type's words, a negative one too.
    assert_eq!(
        small("limit: -1\n").message,
        "expected a whole number >= 0, got `-1`"
    );
    assert_eq!(
        small("limit: 2.5\n").message,
        "expected a whole number >= 0, got `2.5`"
    );
    let error = from_json_str::<Small>(r#"{"limit": 5000000000}"#).unwrap_err();
    assert!(error.message.contains("more than 4294967295"), "{error}");
    let error = from_json_str::<Small>(r#"{"limit": -1}"#).unwrap_err();
    assert_eq!(
        error.message,
        "expected a whole number >= 0, got integer `-1`"
    );
}

#[test]
fn duplicate_keys_give_no_library_advice() {
    let error = typed_error("name: a\nname: b\n");
    assert_eq!(error.line, Some(2));
    assert_eq!(error.message, "duplicate key `name`");
}

#[test]
fn typed_errors_in_set_values_name_the_set() {
    let mut doc = Document::parse("name: a\n");
    doc.set("order", "newest", &[]).unwrap();
    let error = doc.deserialize::<Typed>().unwrap_err();
    assert_eq!(error.field_path, "order");
    assert_eq!(
        error.message,
        "--set order=newest: unknown value `newest`, expected one of fifo, lifo"
    );
}

#[test]
fn setting_a_key_in_an_unclosed_flow_mapping_is_an_error_not_a_panic() {
    // Found by `any_path_in_any_text_never_panics`: a key added to an unclosed flow mapping
    // went one byte before its end, inside the four-byte '𞹍' at 6..10, and sliced there.
    let text = "&\u{10a3f}{\u{1ee4d}{\u{ab28}}\u{ae}}";
    let mut doc = Document::parse(text);
    let _ = doc.error_at("a", "x");
    assert!(doc.set("a", "1", &["a"]).is_err());
    let _ = doc.deserialize::<Typed>();
}

proptest::proptest! {
    #[test]
    fn any_path_in_any_text_never_panics(text in "\\PC{0,120}", path in "\\PC{0,30}") {
        let mut doc = Document::parse(&text);
        let _ = doc.error_at(&path, "x");
        let _ = doc.set(&path, "1", &["a"]);
        let _ = doc.deserialize::<Typed>();
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "only parsed for its errors")]
struct Outer {
    inner: Typed,
}

#[test]
fn json_errors_name_the_field_path_line_and_column() {
    let error = from_json_str::<Outer>(r#"{"inner": {"name": "a", "count": "x"}}"#).unwrap_err();
    assert_eq!(error.field_path, "inner.count");
    assert_eq!((error.line, error.column), (Some(1), Some(36)));
    assert_eq!(
        error.message,
        "expected a whole number >= 0, got string \"x\""
    );
    let error = from_json_str::<Outer>(r#"{"inner": {"name": "a", "order": "x"}}"#).unwrap_err();
    assert_eq!(
        error.to_string(),
        "inner.order: unknown value `x`, expected `fifo` or `lifo` (line 1, column 36)"
    );
    let error = from_json_str::<Outer>(r#"{"inner": {"name": "a", "name": "b"}}"#).unwrap_err();
    assert_eq!(error.message, "duplicate key `name`");
    let error = from_json_str::<Outer>(r#"{"inner": {"nmae": "a"}}"#).unwrap_err();
    assert_eq!(
        (error.field_path.as_str(), error.message.as_str()),
        ("inner.nmae", "unknown field `nmae`")
    );
    let error = from_json_str::<Outer>(r#"{"inner": {"name": "a"}} x"#).unwrap_err();
    assert_eq!(error.field_path, "");
    assert_eq!(error.line, Some(1));
}
