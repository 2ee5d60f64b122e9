//! A self-contained HTML page: inline CSS, inline SVG figures, no scripts, no network.

use crate::plot::{Plot, PlotError, render_svg};

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
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

/// Escapes text and shows `code` spans (Markdown backticks, as nines' messages quote commands) as
/// code instead of backticks.
pub fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    let mut parts = s.split('`').peekable();
    let mut code = false;
    while let Some(part) = parts.next() {
        // An unmatched last backtick stays as written.
        if code && parts.peek().is_none() {
            out.push('`');
            out.push_str(&escape(part));
            break;
        }
        if code {
            out.push_str("<code>");
            out.push_str(&escape(part));
            out.push_str("</code>");
        } else {
            out.push_str(&escape(part));
        }
        code = !code;
    }
    out
}

/// A figure: a plot and what it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Short identifier, also the PNG file name (`<id>.png`).
    pub id: String,
    pub caption: String,
    pub plot: Plot,
}

/// The page's style. Device tables (16 columns up to p99.9999 and max) fit the page without
/// sideways scrolling at 1400 px (the page is 1360 px wide) and, with smaller type and padding
/// under 1100 px, at 900 px; a path cell may break anywhere. `.tw` still scrolls what cannot fit
/// (a table of many more percentiles) rather than clip it.
pub const STYLE: &str = "body{font-family:sans-serif;max-width:1360px;margin:2em auto;padding:0 1em;color:#222;\
line-height:1.4}h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;\
margin-top:1.8em}table{border-collapse:collapse;margin:.6em 0;font-size:.85em}\
td,th{border:1px solid #ccc;padding:.2em .45em;text-align:right;white-space:nowrap}th{background:#f3f3f3}\
td.path{white-space:normal;word-break:break-all;min-width:8em}\
@media (max-width:1100px){body{margin:1em auto;padding:0 .5em}table{font-size:.72em}td,th{padding:.15em .25em}}\
td:first-child,th:first-child{text-align:left}figure{margin:1em 0}figcaption{color:#555;\
font-size:.9em}ul.summary li{margin:.3em 0}.warn{color:#a40}pre{background:#f6f6f6;\
padding:.6em;overflow-x:auto;font-size:.85em}svg{max-width:100%;height:auto}\
.tw{overflow-x:auto}code{background:#f3f3f3;padding:0 .2em}.meta{color:#555}\
td.unres{color:#999}";

/// Builds a page section by section.
pub struct Page {
    body: String,
    /// Warnings already on the page: each is shown once, however many parts of the report
    /// raise it.
    warned: Vec<String>,
}

impl Page {
    pub fn new(title: &str) -> Page {
        let mut body = String::new();
        body.push_str(&format!("<h1>{}</h1>\n", escape(title)));
        Page {
            body,
            warned: Vec::new(),
        }
    }

    pub fn h2(&mut self, text: &str) -> &mut Self {
        self.body.push_str(&format!("<h2>{}</h2>\n", escape(text)));
        self
    }

    pub fn p(&mut self, text: &str) -> &mut Self {
        self.body.push_str(&format!("<p>{}</p>\n", inline(text)));
        self
    }

    /// A line about the run itself (where, when, on what), under the title.
    pub fn meta(&mut self, text: &str) -> &mut Self {
        self.body
            .push_str(&format!("<p class=\"meta\">{}</p>\n", inline(text)));
        self
    }

    /// A warning, once: a text already on the page is not repeated.
    pub fn warning(&mut self, text: &str) -> &mut Self {
        if self.warned.iter().any(|w| w == text) {
            return self;
        }
        self.warned.push(text.to_string());
        self.body
            .push_str(&format!("<p class=\"warn\">{}</p>\n", inline(text)));
        self
    }

    pub fn list(&mut self, items: &[String]) -> &mut Self {
        self.body.push_str("<ul class=\"summary\">\n");
        for i in items {
            self.body.push_str(&format!("<li>{}</li>\n", inline(i)));
        }
        self.body.push_str("</ul>\n");
        self
    }

    pub fn pre(&mut self, text: &str) -> &mut Self {
        self.body
            .push_str(&format!("<pre>{}</pre>\n", escape(text)));
        self
    }

    /// A table; a cell holding [`UNRESOLVED`] is shown greyed as not resolved.
    pub fn table(&mut self, header: &[String], rows: &[Vec<String>]) -> &mut Self {
        self.body.push_str("<div class=\"tw\"><table>\n<tr>");
        for h in header {
            self.body.push_str(&format!("<th>{}</th>", escape(h)));
        }
        self.body.push_str("</tr>\n");
        let path_col = header.iter().position(|h| h == "path");
        for r in rows {
            self.body.push_str("<tr>");
            for (i, c) in r.iter().enumerate() {
                if Some(i) == path_col {
                    self.body
                        .push_str(&format!("<td class=\"path\">{}</td>", escape(c)));
                } else if c == UNRESOLVED {
                    self.body.push_str(&format!(
                        "<td class=\"unres\" title=\"too few I/Os to resolve this percentile\">{}</td>",
                        escape(c)
                    ));
                } else {
                    self.body.push_str(&format!("<td>{}</td>", escape(c)));
                }
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table></div>\n");
        self
    }

    pub fn figure(&mut self, fig: &Figure) -> Result<&mut Self, PlotError> {
        let svg = render_svg(&fig.plot, crate::plot::DEFAULT_SIZE)?;
        // Drop the XML prolog if any; the SVG element itself is valid inline HTML.
        let svg = match svg.find("<svg") {
            Some(i) => &svg[i..],
            None => svg.as_str(),
        };
        self.body.push_str(&format!(
            "<figure id=\"{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
            escape(&fig.id),
            svg,
            escape(&fig.caption)
        ));
        Ok(self)
    }

    pub fn finish(&self, title: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{}\
             <p style=\"color:#888;font-size:.8em\">Generated by nines {}.</p>\n</body>\n</html>\n",
            escape(title),
            self.body,
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// What a table cell shows for a percentile the sample is too small to resolve (it would only
/// repeat the max).
pub const UNRESOLVED: &str = "n/r";

/// Flattens a JSON value into (dotted key, value) rows for a table.
pub fn flatten_json(v: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>, depth: usize) {
        use serde_json::Value;
        if out.len() >= 500 || depth > 8 {
            return;
        }
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, x, out, depth + 1);
                }
            }
            Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
                let items: Vec<String> = a.iter().map(scalar).collect();
                out.push((prefix.to_string(), items.join(", ")));
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(&format!("{prefix}[{i}]"), x, out, depth + 1);
                }
            }
            x => out.push((prefix.to_string(), scalar(x))),
        }
    }
    fn scalar(v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::String(s) => s.clone(),
            x => x.to_string(),
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_shown_once_and_tables_fit_the_page() {
        let mut p = Page::new("t");
        p.warning("Warning: x")
            .warning("Warning: y")
            .warning("Warning: x");
        let html = p.finish("t");
        assert_eq!(html.matches("Warning: x").count(), 1, "{html}");
        assert_eq!(html.matches("<p class=\"warn\">").count(), 2);
        // The rules that keep a 16-column device table inside the page at 1400 px and 900 px
        // (checked by eye and by measuring in headless Chromium: docs/arch-report.md).
        for rule in [
            "max-width:1360px",
            "@media (max-width:1100px)",
            "td.path{white-space:normal;word-break:break-all",
            ".tw{overflow-x:auto}",
        ] {
            assert!(STYLE.contains(rule), "{rule}");
        }
        let mut p = Page::new("t");
        p.table(
            &["device".into(), "path".into()],
            &[vec!["a".into(), "/very/long/path".into()]],
        );
        assert!(
            p.finish("t")
                .contains("<td class=\"path\">/very/long/path</td>")
        );
    }

    #[test]
    fn escapes_and_flattens() {
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
        let v = serde_json::json!({"cpu": {"governor": "performance", "isolated": [2, 3]},
                                   "irqs": [{"n": 1}], "ok": true});
        let f = flatten_json(&v);
        assert!(f.contains(&("cpu.governor".into(), "performance".into())));
        assert!(f.contains(&("cpu.isolated".into(), "2, 3".into())));
        assert!(f.contains(&("irqs[0].n".into(), "1".into())));
        assert!(f.contains(&("ok".into(), "true".into())));
    }

    #[test]
    fn backticks_become_code_and_figures_scale() {
        assert_eq!(
            inline("steer them with `nines tune --plan`/`--apply` <now>"),
            "steer them with <code>nines tune --plan</code>/<code>--apply</code> &lt;now&gt;"
        );
        assert_eq!(inline("a ` b"), "a ` b");
        assert!(STYLE.contains("svg{max-width:100%;height:auto}"));
    }

    #[test]
    fn page_is_self_contained() {
        let mut p = Page::new("t <1>");
        p.p("a & b").table(&["k".into()], &[vec!["<v>".into()]]);
        let html = p.finish("t");
        assert!(html.contains("<h1>t &lt;1&gt;</h1>"));
        assert!(html.contains("<td>&lt;v&gt;</td>"));
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!html.contains("<script"));
    }
}
