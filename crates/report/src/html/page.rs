//! The HTML page: one self-contained file with inline CSS and SVG, no script and no network,
//! readable from a laptop's width down to a phone's.

use crate::svg::{colour, escape, Chart, Rows};
use sandglass::RunKind;
use std::fmt::Write;

const STYLE: &str = r#"
:root{color-scheme:light}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;margin:0;color:#1b1b1b;background:#fff}
main{max-width:980px;margin:0 auto;padding:12px 18px 48px}
h1{font-size:1.4em;margin:.6em 0 .2em}
h2{font-size:1.15em;margin:1.8em 0 .5em;padding-bottom:.2em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin:1.2em 0 .3em}
.sub{color:#555;margin:0 0 1em}
figure.plot{margin:1.2em 0 1.6em}
figcaption{font-size:.92em;color:#333;margin-bottom:.4em}
figcaption b{color:#111}
svg{display:block;max-width:100%;height:auto;background:#fff}
.chart{overflow-x:auto;-webkit-overflow-scrolling:touch}
.chart svg{min-width:540px}
svg text{font-size:12px;fill:#222}
svg .tick{fill:#555}
svg .axis{stroke:#333;fill:none}
svg .grid{stroke:#e8e8e8}
svg .marker{stroke:#777;stroke-dasharray:3 3}
svg .marker-label{font-size:11px;fill:#333}
svg .axis-title{font-size:13px}
svg .row-label{font-size:12px}
svg path.d{stroke-width:1.6;stroke-linejoin:round}
.legend{font-size:.88em;margin:.3em 0 0}
.legend span{display:inline-block;margin-right:1.1em;white-space:nowrap}
.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px;border-radius:2px}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;font-size:.9em;margin:.3em 0 .8em}
th,td{padding:3px 9px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap;vertical-align:top}
th{border-bottom:1px solid #bbb;font-weight:600}
th:first-child,td:first-child{text-align:left}
td.text{text-align:left;white-space:normal}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:.4em 0;font-size:.92em}
dl.facts dt{color:#555}
dl.facts dd{margin:0;overflow-wrap:anywhere}
.empty{color:#8a3b00;font-style:italic}
ul.warnings li{color:#8a3b00}
code,pre{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;font-size:.88em}
pre{overflow-x:auto;background:#f6f6f6;padding:8px 10px}
details{margin:.6em 0}
summary{cursor:pointer;color:#333}
footer{margin-top:3em;color:#666;font-size:.85em}
@media (max-width:600px){body{font-size:14px}main{padding:6px 10px 32px}th,td{padding:3px 6px}}
"#;

/// A plot of the page.
pub enum Plot {
    Chart(Chart),
    Rows(Rows),
    /// Nothing to draw, with the reason shown in its place.
    Empty(String),
}

/// A page being written.
pub struct Page {
    kind: RunKind,
    title: String,
    body: String,
    /// Element ids given so far: a plot shown once per measure gets `NAME-2`, `NAME-3`, ...
    ids: Vec<String>,
}

/// `text` escaped for HTML.
pub fn h(text: &str) -> String {
    escape(text)
}

impl Page {
    /// `kind` is the `data-sandglass-kind` of the page: timer, noise, hourglass or study.
    pub fn new(kind: RunKind, title: &str, subtitle: &str) -> Page {
        let mut body = String::new();
        let _ = write!(
            body,
            "<h1>{}</h1><p class=\"sub\">{}</p>",
            h(title),
            h(subtitle)
        );
        Page {
            kind,
            title: title.to_string(),
            body,
            ids: Vec::new(),
        }
    }

    pub fn section(&mut self, title: &str) {
        let _ = write!(self.body, "<h2>{}</h2>", h(title));
    }

    pub fn subsection(&mut self, title: &str) {
        let _ = write!(self.body, "<h3>{}</h3>", h(title));
    }

    /// A paragraph of plain text.
    pub fn text(&mut self, text: &str) {
        let _ = write!(self.body, "<p>{}</p>", h(text));
    }

    /// Preformatted text, such as a command line.
    pub fn pre(&mut self, text: &str) {
        let _ = write!(self.body, "<pre>{}</pre>", h(text));
    }

    /// A plot under a caption. `name` is the figure's `data-plot`, for checks and links.
    pub fn figure(&mut self, name: &str, caption: &str, plot: Plot) {
        let mut id = name.to_string();
        let mut k = 1;
        while self.ids.contains(&id) {
            k += 1;
            id = format!("{name}-{k}");
        }
        self.ids.push(id.clone());
        let empty = match &plot {
            Plot::Chart(c) if c.is_empty() => {
                Some("nothing in this run can be drawn here".to_string())
            }
            Plot::Rows(r) if r.is_empty() => Some("no interval falls in the window".to_string()),
            Plot::Empty(why) => Some(why.clone()),
            _ => None,
        };
        if let Some(why) = empty {
            let _ = write!(
                self.body,
                "<figure class=\"plot\" id=\"{i}\" data-plot=\"{n}\" data-empty=\"{w}\"><figcaption>{c}</figcaption><p class=\"empty\">Not drawn: {w}.</p></figure>",
                i = h(&id),
                n = h(name),
                w = h(&why),
                c = h(caption)
            );
            return;
        }
        let _ = write!(
            self.body,
            "<figure class=\"plot\" id=\"{i}\" data-plot=\"{n}\"><figcaption>{c}</figcaption>",
            i = h(&id),
            n = h(name),
            c = h(caption)
        );
        match plot {
            Plot::Chart(c) => {
                // On a phone the chart keeps a legible size and scrolls sideways.
                let _ = write!(self.body, "<div class=\"chart\">{}</div>", c.svg());
                if c.series.len() > 1 {
                    self.body.push_str("<p class=\"legend\">");
                    for s in &c.series {
                        let _ = write!(
                            self.body,
                            "<span><i style=\"background:{}\"></i>{}</span>",
                            colour(s.colour),
                            h(&s.name)
                        );
                    }
                    self.body.push_str("</p>");
                }
            }
            Plot::Rows(r) => {
                let _ = write!(self.body, "<div class=\"chart\">{}</div>", r.svg());
            }
            Plot::Empty(_) => {}
        }
        self.body.push_str("</figure>");
    }

    /// A table: the first column left-aligned (labels), the others right-aligned (figures);
    /// columns named in `text_columns` are left-aligned and wrap.
    pub fn table(&mut self, head: &[&str], rows: &[Vec<String>], text_columns: &[usize]) {
        self.body
            .push_str("<div class=\"scroll\"><table><thead><tr>");
        for c in head {
            let _ = write!(self.body, "<th>{}</th>", h(c));
        }
        self.body.push_str("</tr></thead><tbody>");
        for r in rows {
            self.body.push_str("<tr>");
            for (i, c) in r.iter().enumerate() {
                if text_columns.contains(&i) {
                    let _ = write!(self.body, "<td class=\"text\">{}</td>", h(c));
                } else {
                    let _ = write!(self.body, "<td>{}</td>", h(c));
                }
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</tbody></table></div>");
    }

    /// Name-value pairs.
    pub fn facts(&mut self, pairs: &[(&str, String)]) {
        self.body.push_str("<dl class=\"facts\">");
        for (k, v) in pairs {
            let _ = write!(self.body, "<dt>{}</dt><dd>{}</dd>", h(k), h(v));
        }
        self.body.push_str("</dl>");
    }

    /// A bulleted list; `class` styles it (such as `warnings`).
    pub fn list(&mut self, class: &str, items: &[String]) {
        let _ = write!(self.body, "<ul class=\"{}\">", h(class));
        for i in items {
            let _ = write!(self.body, "<li>{}</li>", h(i));
        }
        self.body.push_str("</ul>");
    }

    /// A collapsed block of preformatted text.
    pub fn details(&mut self, summary: &str, text: &str) {
        let _ = write!(
            self.body,
            "<details><summary>{}</summary><pre>{}</pre></details>",
            h(summary),
            h(text)
        );
    }

    /// The finished document.
    pub fn finish(self, footer: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\" data-sandglass-kind=\"{}\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><meta name=\"generator\" content=\"sandglass\"><title>{}</title><style>{}</style></head><body><main>{}<footer>{}</footer></main></body></html>\n",
            self.kind,
            h(&self.title),
            STYLE.trim(),
            self.body,
            h(footer)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svg::{Axis, Series, Style};

    #[test]
    fn a_page_is_self_contained_and_escaped() {
        let mut p = Page::new(RunKind::Timer, "run <1>", "sub & title");
        p.table(&["CPU", "p99"], &[vec!["0".into(), "<5 µs".into()]], &[]);
        let mut c = Chart::new(Axis::log("x (µs)"), Axis::log("y (count)"), "d");
        c.series.push(Series {
            name: "CPU 0".into(),
            style: Style::Line,
            points: vec![(1.0, 1.0), (10.0, 5.0)],
            colour: 0,
        });
        p.figure("latency-histogram", "caption", Plot::Chart(c));
        p.figure("exceedance", "caption", Plot::Empty("no samples".into()));
        let s = p.finish("f");
        assert!(s.starts_with("<!DOCTYPE html>"));
        assert!(s.contains("data-sandglass-kind=\"timer\""));
        assert!(s.contains("<title>run &lt;1&gt;</title>"));
        assert!(s.contains("&lt;5 µs"));
        assert!(s.contains("data-plot=\"latency-histogram\"><figcaption>"));
        assert!(s.contains("data-empty=\"no samples\""));
        // Nothing is fetched: no script, no external reference.
        assert!(!s.contains("<script") && !s.contains("http://") && !s.contains("https://"));
    }
}
