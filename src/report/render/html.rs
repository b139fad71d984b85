//! `report.html`'s page: a builder of one self-contained HTML document (inline SVG charts, a
//! system font stack, no script, nothing loaded from anywhere), and the escaping every string
//! in it goes through.
//!
//! Pure: bytes from data, no file system. The page is a function of what is added to it, in
//! the order it is added, so a rerun writes the same bytes (no clock, no map iteration).

use crate::report::verdict::evaluate::ExpectationOutcome;

/// The file name every command writes its page under (a contract).
pub const REPORT_FILE: &str = "report.html";

/// `text` with the five characters that mean something in HTML (text or attribute values)
/// replaced by their entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value for an `id`: letters, digits, `-`, `_` and `.` kept, anything else `-`, so a
/// chart's file name can be an anchor whatever it holds.
fn id_of(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_ascii_alphanumeric() || "-_.".contains(c) {
            true => c,
            false => '-',
        })
        .collect()
}

/// No web fonts: the reader's own sans-serif and monospace faces.
const STYLE: &str = "\
body{font-family:system-ui,-apple-system,\"Segoe UI\",Roboto,\"Helvetica Neue\",Arial,sans-serif;\
margin:0 auto;max-width:1100px;padding:1em 2em;color:#1a1a1a;background:#fff;line-height:1.4}\
h1{font-size:1.6em;margin-bottom:0.2em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}\
.wide{overflow-x:auto}table{border-collapse:collapse;margin:0.6em 0;font-variant-numeric:tabular-nums}\
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right;white-space:nowrap}\
th:first-child,td:first-child{text-align:left}th{background:#f2f2f2}\
td.text,th.text{text-align:left;white-space:normal}\
.verdict{font-weight:bold}.pass{color:#11692b;background:#e6f4ea}.fail{color:#a50e0e;background:#fce8e6}\
dl{display:grid;grid-template-columns:max-content auto;gap:0.2em 1em}dt{font-weight:bold}dd{margin:0}\
figure{margin:1em 0}.row{display:flex;gap:1em}.row figure{flex:1;min-width:0}figure svg{display:block;max-width:100%;height:auto;border:1px solid #eee}\
figcaption{font-size:0.9em;color:#555}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace}.mono{white-space:pre-wrap}\
";

/// One report page, built section by section.
pub struct Page {
    title: String,
    body: String,
}

impl Page {
    /// A page titled `title` (the scenario's name, say), with `kind` (`run`, `plan`, ...)
    /// in the browser tab.
    pub fn new(kind: &str, title: &str) -> Page {
        let mut page = Page {
            title: format!("routersim {kind}: {title}"),
            body: String::new(),
        };
        page.body += &format!("<h1>{}</h1>\n", escape(title));
        page
    }

    /// A section heading, with `section-<id>` as its anchor (so that a table in it may be
    /// `id` itself).
    pub fn section(&mut self, id: &str, heading: &str) {
        self.body += &format!(
            "<h2 id=\"section-{}\">{}</h2>\n",
            id_of(id),
            escape(heading)
        );
    }

    pub fn paragraph(&mut self, text: &str) {
        self.body += &format!("<p>{}</p>\n", escape(text));
    }

    /// A paragraph whose text is `text` in a monospace face (a command line, a warning).
    pub fn mono(&mut self, class: &str, text: &str) {
        self.body += &format!("<p class=\"mono {}\">{}</p>\n", id_of(class), escape(text));
    }

    /// Name-value pairs, in order.
    pub fn facts(&mut self, facts: &[(String, String)]) {
        self.body += "<dl>\n";
        for (name, value) in facts {
            self.body += &format!("<dt>{}</dt><dd>{}</dd>\n", escape(name), escape(value));
        }
        self.body += "</dl>\n";
    }

    /// A table with `id`: a header row and rows of text cells (numbers right-aligned, the
    /// first column left-aligned).
    pub fn table(&mut self, id: &str, header: &[String], rows: &[Vec<String>]) {
        self.body += &format!(
            "<div class=\"wide\"><table id=\"{}\">\n<thead><tr>",
            id_of(id)
        );
        for name in header {
            self.body += &format!("<th>{}</th>", escape(name));
        }
        self.body += "</tr></thead>\n<tbody>\n";
        for row in rows {
            self.body += "<tr>";
            for cell in row {
                self.body += &format!("<td>{}</td>", escape(cell));
            }
            self.body += "</tr>\n";
        }
        self.body += "</tbody>\n</table></div>\n";
    }

    /// Each expectation's verdict (`PASS` or `FAIL`), label, measured value, bound and why
    /// it could not be measured, if it could not; in the table `id`.
    pub fn verdicts(&mut self, id: &str, outcomes: &[ExpectationOutcome]) {
        self.body += &format!(
            "<div class=\"wide\"><table id=\"{}\">\n<thead><tr><th>verdict</th><th class=\"text\">expectation</th><th>value</th>\
             <th>bound</th><th>seed</th><th class=\"text\">note</th></tr></thead>\n<tbody>\n",
            id_of(id)
        );
        for o in outcomes {
            self.body += &verdict_row(o);
        }
        self.body += "</tbody>\n</table></div>\n";
    }

    /// Every SVG among `files` as an inline figure (`files`' order; other files are
    /// skipped), captioned with a link to its PNG when there is one.
    pub fn charts<S: AsRef<str>, B: AsRef<[u8]>>(&mut self, files: &[(S, B)]) {
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_ref()).collect();
        for (name, bytes) in files {
            let Some(stem) = name.as_ref().strip_suffix(".svg") else {
                continue;
            };
            let png = format!("{stem}.png");
            self.chart(stem, bytes.as_ref(), names.contains(&png.as_str()));
        }
    }

    /// The SVGs among `files` named `stems` (in that order), side by side in one row (each
    /// with its PNG link, as [`Page::charts`]), so that charts over one time axis can be
    /// read against each other.
    pub fn charts_row<S: AsRef<str>, B: AsRef<[u8]>>(&mut self, files: &[(S, B)], stems: &[&str]) {
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_ref()).collect();
        self.body += "<div class=\"row\">\n";
        for stem in stems {
            let svg = format!("{stem}.svg");
            if let Some((_, bytes)) = files.iter().find(|(n, _)| n.as_ref() == svg) {
                let png = format!("{stem}.png");
                self.chart(stem, bytes.as_ref(), names.contains(&png.as_str()));
            }
        }
        self.body += "</div>\n";
    }

    fn chart(&mut self, stem: &str, svg: &[u8], with_png: bool) {
        let svg = String::from_utf8_lossy(svg);
        // The renderer writes a bare `<svg ...>` element; anything before it (an XML
        // declaration) has no place inside HTML.
        let svg = svg.find("<svg").map_or(&svg[..], |at| &svg[at..]);
        let stem_text = escape(stem);
        let mut caption = format!("<a href=\"{stem_text}.svg\">{stem_text}.svg</a>");
        if with_png {
            caption += &format!(" · <a href=\"{stem_text}.png\">{stem_text}.png</a>");
        }
        self.body += &format!(
            "<figure class=\"chart\" id=\"chart-{}\">\n{}\n<figcaption>{caption}</figcaption>\n</figure>\n",
            id_of(stem),
            svg.trim_end()
        );
    }

    /// A list of relative links to `names` (files beside the page).
    pub fn links<S: AsRef<str>>(&mut self, names: &[S]) {
        self.body += "<ul class=\"files\">\n";
        for name in names {
            let name = escape(name.as_ref());
            self.body += &format!("<li><a href=\"{name}\">{name}</a></li>\n");
        }
        self.body += "</ul>\n";
    }

    /// The whole document.
    pub fn finish(self) -> Vec<u8> {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{}\
             <footer><p>Written by routersim {}.</p></footer>\n</body>\n</html>\n",
            escape(&self.title),
            self.body,
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes()
    }
}

fn verdict_row(o: &ExpectationOutcome) -> String {
    let (class, verdict) = match o.passed {
        true => ("pass", "PASS"),
        false => ("fail", "FAIL"),
    };
    format!(
        "<tr class=\"{class}\"><td class=\"verdict {class}\">{verdict}</td><td class=\"text\">{}</td>\
         <td>{}</td><td>{}</td><td>{}</td><td class=\"text\">{}</td></tr>\n",
        escape(&o.label),
        escape(&o.value_text()),
        escape(&o.bound_text()),
        o.seed,
        escape(o.reason.as_deref().unwrap_or(""))
    )
}

/// Only the names of `files` that a page links to: every file but the page itself, in order.
pub fn linked_names<S: AsRef<str>, B>(files: &[(S, B)]) -> Vec<String> {
    files
        .iter()
        .map(|(n, _)| n.as_ref().to_string())
        .filter(|n| n != REPORT_FILE)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_replaces_every_character_that_means_markup() {
        assert_eq!(escape("<b>&\"x\"'"), "&lt;b&gt;&amp;&quot;x&quot;&#39;");
        assert_eq!(escape("premium ≤ 2 s"), "premium ≤ 2 s");
    }

    #[test]
    fn an_id_keeps_only_characters_safe_in_an_attribute() {
        assert_eq!(id_of("latency_phases_<b>\"x"), "latency_phases_-b--x");
    }

    #[test]
    fn a_page_is_self_contained_and_loads_nothing() {
        let mut page = Page::new("run", "demo");
        page.charts(&[
            ("a.png", b"PNG".to_vec()),
            (
                "a.svg",
                b"<?xml version=\"1.0\"?>\n<svg width=\"2\"></svg>\n".to_vec(),
            ),
        ]);
        let html = String::from_utf8(page.finish()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
        assert!(!html.contains("<?xml"), "{html}");
        assert!(html.contains("<figure class=\"chart\" id=\"chart-a\">\n<svg width=\"2\">"));
        assert!(html.contains("<a href=\"a.png\">a.png</a>"));
        for loads in [
            "<script", "src=", "@import", "url(", "<link", "http://", "https://",
        ] {
            assert!(!html.contains(loads), "{loads} in {html}");
        }
    }
}
