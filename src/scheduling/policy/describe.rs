//! Plain-text table of a validated policy, for `routersim validate` to print.

use super::PolicyConfig;
use super::profile::PolicyProfile;

const HEADERS: [&str; 9] = [
    "profile",
    "class",
    "family",
    "bucket",
    "min_tokens",
    "policy",
    "quantum",
    "busy when",
    "queue limits",
];

/// The resolved classes of every profile as an aligned table, one row per class, the default
/// family marked with `*`, followed by how unnamed requests resolve.
pub fn describe(config: &PolicyConfig) -> String {
    let mut rows: Vec<[String; 9]> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let profiles = config
        .root
        .iter()
        .map(|profile| ("root".to_string(), profile))
        .chain(
            config
                .models
                .iter()
                .map(|(name, profile)| (format!("model \"{name}\""), profile)),
        );
    for (profile_name, profile) in profiles {
        rows.extend(profile_rows(&profile_name, profile));
        notes.push(format!(
            "{profile_name}: {} class(es); requests naming no family or explicit class use family \"{}\"",
            profile.classes().len(),
            profile.default_policy_family().unwrap_or("default")
        ));
    }
    let mut out = render_table(&rows);
    out.push_str("* = default family\n");
    for note in notes {
        out.push_str(&note);
        out.push('\n');
    }
    out
}

fn profile_rows(profile_name: &str, profile: &PolicyProfile) -> Vec<[String; 9]> {
    let dash = || "-".to_string();
    profile
        .classes()
        .iter()
        .map(|class| {
            let family = match class.policy_family.as_deref() {
                Some(family) if Some(family) == profile.default_policy_family() => {
                    format!("{family}*")
                }
                Some(family) => family.to_string(),
                None => "(explicit)".to_string(),
            };
            let min_tokens = class.cache_bucket.as_deref().and_then(|bucket| {
                profile
                    .buckets()
                    .iter()
                    .find(|known| known.name == bucket)
                    .map(|known| known.min_tokens)
            });
            [
                profile_name.to_string(),
                class.name.clone(),
                family,
                class.cache_bucket.clone().unwrap_or_else(dash),
                min_tokens.map_or_else(dash, |tokens| format!(">= {tokens}")),
                class.queue_policy.to_string(),
                class.quantum_tokens.to_string(),
                class.describe_thresholds(),
                class.describe_limits(),
            ]
        })
        .collect()
}

/// Left-aligned columns separated by two spaces, with a header and a rule.
fn render_table(rows: &[[String; 9]]) -> String {
    let mut widths = HEADERS.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header = HEADERS.map(str::to_string);
    let rule = widths.map(|width| "-".repeat(width));
    let mut out = String::new();
    for row in std::iter::once(&header)
        .chain(std::iter::once(&rule))
        .chain(rows)
    {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODELS: &str = include_str!("../../../tests/fixtures/policy/models.yaml");

    #[test]
    fn table_lists_every_class_of_every_profile_aligned() {
        let config = PolicyConfig::from_yaml_str(MODELS, None).unwrap();
        let table = describe(&config);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("profile"), "{table}");
        assert!(lines[1].starts_with("-------"), "{table}");
        let class_rows = &lines[2..6];
        assert!(class_rows[0].starts_with("root"));
        assert!(class_rows[0].contains("premium"));
        assert!(
            class_rows[1].contains("regular*"),
            "default family is marked:\n{table}"
        );
        assert!(class_rows[2].starts_with("model \"llama\""));
        assert!(
            class_rows[3].contains(">= 1024"),
            "bucket bound shown:\n{table}"
        );
        // Aligned: every row's class column starts where the header's does.
        let class_column = lines[0].find("class").unwrap();
        for row in class_rows {
            let cell_start = row[class_column..].chars().next().unwrap();
            assert_ne!(cell_start, ' ', "column misaligned in {row:?}");
            assert_eq!(&row[class_column - 2..class_column], "  ", "{row:?}");
        }
        assert!(table.contains("* = default family"));
    }

    #[test]
    fn explicit_classes_and_limits_are_shown() {
        let sample = include_str!("../../../tests/fixtures/policy/sample.yaml");
        let table = describe(&PolicyConfig::from_yaml_str(sample, None).unwrap());
        let custom = table
            .lines()
            .find(|line| line.contains("custom_priority"))
            .unwrap();
        assert!(custom.contains("(explicit)"), "{custom}");
        assert!(custom.contains("never queues"), "{custom}");
        assert!(
            custom.contains("65536 raw tok, 32768 cached tok /worker"),
            "{custom}"
        );
        let latency = table
            .lines()
            .find(|line| line.contains("latency_cached"))
            .unwrap();
        assert!(latency.contains("prefill > 0.5 x max_batched"), "{latency}");
        assert!(latency.contains("4096"), "{latency}");
    }
}
