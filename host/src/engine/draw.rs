//! Drawings of a graph for `weft graph`: Mermaid flowcharts and Graphviz dot.
//!
//! Sequences become chains of nodes; blocks become clusters holding their bodies; branch arms
//! carry their `when` test on the edge into them.

use std::fmt::Write;

use super::model::{EntryId, EntryKind, Graph};

/// The formats [`Graph::draw`] draws in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawingFormat {
    /// A Mermaid `flowchart TD`.
    Mermaid,
    /// A Graphviz `digraph`.
    Dot,
}

impl Graph {
    /// Draws the workflow in `format`, as `weft graph` prints it: sequences as chains of
    /// nodes, blocks as clusters holding their bodies, branch arms with their `when` test on
    /// the edge into them.
    pub fn draw(&self, format: DrawingFormat) -> String {
        draw(self, format)
    }
}

/// Draws `graph` in `format`.
fn draw(graph: &Graph, format: DrawingFormat) -> String {
    let mut d = Drawing {
        graph,
        format,
        out: String::new(),
        depth: 1,
    };
    match format {
        DrawingFormat::Mermaid => d.out.push_str("flowchart TD\n"),
        DrawingFormat::Dot => d
            .out
            .push_str("digraph workflow {\n  compound=true;\n  node [shape=box];\n"),
    }
    d.node("start", "start", "circle");
    let (first, last) = d.list(&graph.root().body);
    d.edge("start", &first, None);
    d.node("finish", "end", "circle");
    d.edge(&last, "finish", None);
    if format == DrawingFormat::Dot {
        d.out.push_str("}\n");
    }
    d.out
}

struct Drawing<'g> {
    graph: &'g Graph,
    format: DrawingFormat,
    out: String,
    depth: usize,
}

fn quote(text: &str) -> String {
    text.replace('"', "'")
}

impl Drawing<'_> {
    fn indent(&self) -> String {
        "  ".repeat(self.depth)
    }

    fn node(&mut self, id: &str, label: &str, shape: &str) {
        let pad = self.indent();
        let label = quote(label);
        let _ = match (self.format, shape) {
            (DrawingFormat::Mermaid, "circle") => writeln!(self.out, "{pad}{id}((\"{label}\"))"),
            (DrawingFormat::Mermaid, "diamond") => writeln!(self.out, "{pad}{id}{{\"{label}\"}}"),
            (DrawingFormat::Mermaid, _) => writeln!(self.out, "{pad}{id}[\"{label}\"]"),
            (DrawingFormat::Dot, _) => {
                writeln!(self.out, "{pad}{id} [label=\"{label}\", shape={shape}];")
            }
        };
    }

    fn edge(&mut self, from: &str, to: &str, label: Option<&str>) {
        let pad = self.indent();
        let _ = match (self.format, label) {
            (DrawingFormat::Mermaid, Some(l)) => {
                writeln!(self.out, "{pad}{from} -->|\"{}\"| {to}", quote(l))
            }
            (DrawingFormat::Mermaid, None) => writeln!(self.out, "{pad}{from} --> {to}"),
            (DrawingFormat::Dot, Some(l)) => {
                writeln!(self.out, "{pad}{from} -> {to} [label=\"{}\"];", quote(l))
            }
            (DrawingFormat::Dot, None) => writeln!(self.out, "{pad}{from} -> {to};"),
        };
    }

    /// Draws a sequence; returns the ids of its first and last nodes.
    fn list(&mut self, entries: &[EntryId]) -> (String, String) {
        let mut first = None;
        let mut prev: Option<String> = None;
        for &e in entries {
            let (head, tail) = self.entry(e);
            if let Some(p) = &prev {
                self.edge(p, &head, None);
            }
            first.get_or_insert(head);
            prev = Some(tail);
        }
        (first.unwrap_or_default(), prev.unwrap_or_default())
    }

    /// Draws one entry; returns the ids of its entry and exit nodes.
    fn entry(&mut self, id: EntryId) -> (String, String) {
        let entry = self.graph.entry(id);
        let name = format!("e{id}");
        match &entry.kind {
            EntryKind::Step(s) => {
                self.node(
                    &name,
                    &format!(
                        "{} ({}: {})",
                        entry.id,
                        s.plugin.rsplit('/').next().unwrap_or_default(),
                        s.step
                    ),
                    "box",
                );
                (name.clone(), name)
            }
            EntryKind::Agent(a) => {
                let tools: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
                self.node(
                    &name,
                    &format!(
                        "{} (agent: {}; tools: {})",
                        entry.id,
                        a.model,
                        if tools.is_empty() {
                            "none".to_owned()
                        } else {
                            tools.join(", ")
                        }
                    ),
                    "box",
                );
                (name.clone(), name)
            }
            EntryKind::Map { expr } => {
                self.node(&name, &format!("{} = map {}", entry.id, expr.source), "box");
                (name.clone(), name)
            }
            EntryKind::Sleep { ms, until } => {
                let what = match (ms, until) {
                    (Some(ms), _) => format!("{ms} ms"),
                    (None, Some(u)) => format!("until {}", u.source),
                    _ => String::new(),
                };
                self.node(&name, &format!("{} (sleep {what})", entry.id), "box");
                (name.clone(), name)
            }
            EntryKind::Parallel { arms } => self.fan(
                &name,
                &format!("parallel {}", entry.id),
                arms.iter().map(|a| (*a, None)).collect(),
            ),
            EntryKind::Branch { arms } => self.fan(
                &name,
                &format!("branch {}", entry.id),
                arms.iter()
                    .map(|a| (a.entry, Some(a.when.source.clone())))
                    .collect(),
            ),
            EntryKind::Foreach { concurrency, body } => self.cluster(
                &name,
                &format!("foreach {} (concurrency {concurrency})", entry.id),
                body,
            ),
            EntryKind::Loop {
                test,
                until,
                max_iterations,
                body,
            } => {
                let kind = if *until { "do-until" } else { "do-while" };
                let max = max_iterations
                    .map(|m| format!(", max {m}"))
                    .unwrap_or_default();
                let (head, tail) = self.cluster(&name, &format!("loop {}", entry.id), body);
                let test_node = format!("{name}_test");
                self.node(
                    &test_node,
                    &format!("{kind} {}{max}", test.source),
                    "diamond",
                );
                self.edge(&tail, &test_node, None);
                self.edge(&test_node, &head, Some("again"));
                (head, test_node)
            }
            EntryKind::Workflow { file } => {
                let body = self.graph.file(*file).body.clone();
                self.cluster(
                    &name,
                    &format!("workflow {} ({})", entry.id, self.graph.file(*file).id),
                    &body,
                )
            }
            EntryKind::Group { body } => self.cluster(&name, &entry.id, body),
        }
    }

    fn open(&mut self, name: &str, label: &str) {
        let pad = self.indent();
        let _ = match self.format {
            DrawingFormat::Mermaid => {
                writeln!(self.out, "{pad}subgraph {name} [\"{}\"]", quote(label))
            }
            DrawingFormat::Dot => writeln!(
                self.out,
                "{pad}subgraph cluster_{name} {{\n{pad}  label=\"{}\";",
                quote(label)
            ),
        };
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth -= 1;
        let pad = self.indent();
        let _ = match self.format {
            DrawingFormat::Mermaid => writeln!(self.out, "{pad}end"),
            DrawingFormat::Dot => writeln!(self.out, "{pad}}}"),
        };
    }

    fn cluster(&mut self, name: &str, label: &str, body: &[EntryId]) -> (String, String) {
        self.open(name, label);
        let ends = self.list(body);
        self.close();
        ends
    }

    fn fan(
        &mut self,
        name: &str,
        label: &str,
        arms: Vec<(EntryId, Option<String>)>,
    ) -> (String, String) {
        self.open(name, label);
        let split = format!("{name}_in");
        let join = format!("{name}_out");
        self.node(&split, label, "diamond");
        self.node(&join, "join", "circle");
        for (arm, when) in arms {
            let (head, tail) = self.entry(arm);
            self.edge(&split, &head, when.as_deref());
            self.edge(&tail, &join, None);
        }
        self.close();
        (split, join)
    }
}
