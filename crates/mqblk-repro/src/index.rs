//! `mqblk repro all`'s report: one HTML page, `DIR/index.html`, with every
//! experiment's question, the seed's answer, ours, the seed's figures
//! beside ours with their sources, and the plot, plus the machine it ran
//! on. It needs no server and no network: the style is inline, and each
//! plot is the experiment's own PNG, linked by a relative path
//! (`NAME/NAME.png`), so the directory can be moved or copied whole.
//!
//! A short inline script marks the page once it has loaded: the body's
//! `data-images-loaded` says how many plots loaded of how many, and a plot
//! that did not load is said in its place.

use std::fmt::Write as _;
use std::time::Duration;

use super::experiment::Written;
use super::machine::Machine;
use super::seed::SEEDS;
use super::table::{seed_table, Table};

/// Escape text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

/// A table as HTML.
fn table(t: &Table, class: &str) -> String {
    let mut s = format!("<table class=\"{class}\">\n<thead><tr>");
    for c in &t.columns {
        let _ = write!(s, "<th>{}</th>", esc(c));
    }
    s.push_str("</tr></thead>\n<tbody>\n");
    for r in &t.rows {
        s.push_str("<tr>");
        for c in r {
            let _ = write!(s, "<td>{}</td>", esc(c));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody></table>\n");
    s
}

const STYLE: &str = "\
body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.3rem;margin-top:2.5rem;border-top:1px solid #ccc;padding-top:1rem}
table{border-collapse:collapse;margin:0.8rem 0;font-size:0.9rem}
th,td{border:1px solid #ccc;padding:0.25rem 0.5rem;vertical-align:top;text-align:left}
th{background:#f2f2f2}
table.points{font-size:0.8rem}
img{max-width:100%;border:1px solid #ddd}
.q{font-weight:bold}.failed{color:#a00}.missing{color:#a00;font-weight:bold}
details{margin:0.5rem 0}";

const SCRIPT: &str = "\
window.addEventListener('load',function(){
var imgs=document.querySelectorAll('img.plot'),ok=0;
imgs.forEach(function(i){if(i.complete&&i.naturalWidth>0){ok++;}else{
var p=document.createElement('p');p.className='missing';
p.textContent='plot not found: '+i.getAttribute('src');i.replaceWith(p);}});
document.body.setAttribute('data-images-loaded',ok+'/'+imgs.length);});";

/// The page for these experiments, run at `scale`, in `total`.
pub fn page(done: &[Written], failed: &[(&str, String)], scale: f64, total: Duration) -> String {
    let machine = Machine::now();
    let mut s = String::new();
    s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    s.push_str("<title>mqblk repro: the seeds' experiments</title>\n");
    let _ = writeln!(s, "<style>\n{STYLE}\n</style>");
    let _ = writeln!(s, "<script>\n{SCRIPT}\n</script>");
    s.push_str("</head>\n<body>\n<h1>mqblk repro: the seeds' experiments</h1>\n");
    let scale_arg = if scale == 1.0 {
        String::new()
    } else {
        format!(" --scale={scale}")
    };
    let _ = writeln!(
        s,
        "<p>Written by <code>mqblk repro all{}</code> in {:.0} s. Each experiment reruns a \
         measurement from one of the documents mqblk grew from (the seeds, cited by file \
         name and table, figure or section) and sets the seed's figure beside ours. Every \
         point is the median of several runs; the tables give the lowest and highest, and \
         the plots draw them as error bars.</p>",
        esc(&scale_arg),
        total.as_secs_f64()
    );
    s.push_str("<h2 id=\"machine\">The machine</h2>\n<table>\n");
    for (k, v) in machine.lines() {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    s.push_str("</table>\n<h2 id=\"seeds\">The seeds</h2>\n<ul>\n");
    for seed in SEEDS {
        let _ = writeln!(
            s,
            "<li><code>{}</code>: {}</li>",
            esc(seed.file),
            esc(seed.what)
        );
    }
    s.push_str("</ul>\n<h2 id=\"experiments\">The experiments</h2>\n<ul>\n");
    for w in done {
        let _ = writeln!(
            s,
            "<li><a href=\"#{0}\">{0}</a>: {1}</li>",
            esc(w.exp.name),
            esc(w.exp.question)
        );
    }
    for (name, _) in failed {
        let _ = writeln!(
            s,
            "<li><a href=\"#{0}\">{0}</a>: <span class=\"failed\">failed</span></li>",
            esc(name)
        );
    }
    s.push_str("</ul>\n");
    for w in done {
        let name = esc(w.exp.name);
        let _ = writeln!(s, "<h2 id=\"{name}\">{}</h2>", esc(w.exp.title));
        let _ = writeln!(
            s,
            "<p><span class=\"q\">The question.</span> {}</p>",
            esc(w.exp.question)
        );
        let _ = writeln!(
            s,
            "<p><span class=\"q\">The seed's answer.</span> {}</p>",
            esc(w.exp.seed_answer)
        );
        let _ = writeln!(
            s,
            "<p><span class=\"q\">Ours.</span> {}</p>",
            esc(&w.outcome.answer)
        );
        s.push_str(&table(&seed_table(&w.outcome.seed), "seed"));
        let _ = writeln!(
            s,
            "<p><img class=\"plot\" src=\"{name}/{name}.png\" alt=\"{}\"></p>",
            esc(w.exp.title)
        );
        let _ = writeln!(
            s,
            "<p>{} points in {:.1} s. Files: <a href=\"{name}/{name}.svg\">{name}.svg</a>, \
             <a href=\"{name}/{name}.csv\">{name}.csv</a>, <a href=\"{name}/{name}.md\">{name}.md\
             </a>, and the fio-shaped JSON of every run under <code>{name}/points/</code>.</p>",
            w.points,
            w.elapsed.as_secs_f64()
        );
        s.push_str("<details><summary>Every point</summary>\n");
        s.push_str(&table(&w.outcome.points, "points"));
        s.push_str("</details>\n");
        if !w.outcome.notes.is_empty() {
            s.push_str("<ul>\n");
            for n in &w.outcome.notes {
                let _ = writeln!(s, "<li>{}</li>", esc(n));
            }
            s.push_str("</ul>\n");
        }
    }
    for (name, err) in failed {
        let _ = writeln!(
            s,
            "<h2 id=\"{0}\">{0}</h2>\n<p class=\"failed\">failed: {1}</p>",
            esc(name),
            esc(err)
        );
    }
    s.push_str("</body>\n</html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        let mut t = Table::new(&["x<y"]);
        t.push(vec!["1 & 2".into()]);
        let h = table(&t, "points");
        assert!(h.contains("<th>x&lt;y</th>") && h.contains("<td>1 &amp; 2</td>"));
    }
}
