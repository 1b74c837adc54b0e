//! A view's neighbourhood for its page: the views it depends on and those
//! depending on it, a few levels each way and capped, laid out in layers
//! by rust-sugiyama and drawn as SVG whose boxes link to their views.
//!
//! Invariant: reads only the service's table rows it is given; knows
//! neither HTTP nor the metastore. What is left out past the caps is
//! counted and said, never silently dropped.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use crate::model::ViewState;
use crate::scheduler::table::Table;

/// Levels drawn upstream and downstream of the view.
pub const DEPTH: usize = 2;
/// Views drawn on each side at most; the rest are counted.
pub const PER_SIDE: usize = 20;

/// The views drawn around one, and what depends on what among them.
#[derive(Debug)]
pub struct Neighbourhood {
    /// The view itself first.
    pub nodes: Vec<Node>,
    /// (dependency, dependent), as indices into `nodes`.
    pub edges: Vec<(usize, usize)>,
    /// Views within `DEPTH` left out by the caps, upstream and downstream.
    pub hidden_upstream: usize,
    pub hidden_downstream: usize,
}

#[derive(Debug)]
pub struct Node {
    pub url: String,
    pub state: ViewState,
    /// Negative upstream, positive downstream.
    pub level: i32,
}

/// The neighbourhood of `center` among the table's views.
pub fn neighbourhood(table: &Table, center: u32) -> Neighbourhood {
    let views = table.views();
    let mut included: HashMap<u32, usize> = HashMap::new();
    let mut nodes = Vec::new();
    let mut add = |id: u32, level: i32, nodes: &mut Vec<Node>| {
        included.insert(id, nodes.len());
        let row = &views[id as usize];
        nodes.push(Node { url: row.url.to_string(), state: row.state, level });
    };
    add(center, 0, &mut nodes);
    let mut hidden = [0usize; 2];
    for (side, direction) in [-1i32, 1].into_iter().enumerate() {
        let mut seen: HashSet<u32> = HashSet::from([center]);
        let mut frontier = vec![center];
        let mut drawn = 0;
        for depth in 1..=DEPTH as i32 {
            let neighbours: Vec<u32> = if direction < 0 {
                frontier.iter().flat_map(|&id| views[id as usize].dependencies.iter().copied()).collect()
            } else {
                frontier.iter().flat_map(|&id| table.dependents(id).iter().copied()).collect()
            };
            let mut next = Vec::new();
            for neighbour in neighbours {
                if (neighbour as usize) >= views.len() || !seen.insert(neighbour) {
                    continue;
                }
                if drawn == PER_SIDE {
                    hidden[side] += 1;
                    continue;
                }
                drawn += 1;
                add(neighbour, direction * depth, &mut nodes);
                next.push(neighbour);
            }
            frontier = next;
        }
    }
    let mut edges = Vec::new();
    let ids: Vec<(u32, usize)> = included.iter().map(|(&id, &index)| (id, index)).collect();
    for (id, dependent) in ids {
        for dependency in views[id as usize].dependencies.iter() {
            if let Some(&dependency) = included.get(dependency) {
                edges.push((dependency, dependent));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    Neighbourhood { nodes, edges, hidden_upstream: hidden[0], hidden_downstream: hidden[1] }
}

const BOX_WIDTH: f64 = 250.0;
const BOX_HEIGHT: f64 = 26.0;
const COLUMN_GAP: f64 = 60.0;
const ROW_GAP: f64 = 10.0;
/// Characters of a URL path that fit a box; longer ones keep their end.
const LABEL_CHARS: usize = 35;

/// Where each node's box goes, left to right from upstream to downstream:
/// rust-sugiyama ranks the nodes in layers and orders each layer to reduce
/// crossings; its layers become columns here.
fn positions(graph: &Neighbourhood) -> Vec<(f64, f64)> {
    let count = graph.nodes.len();
    let mut placed = vec![(0.0, 0.0); count];
    if graph.edges.is_empty() {
        return placed;
    }
    let vertices: Vec<(u32, (f64, f64))> = (0..count as u32).map(|i| (i, (BOX_HEIGHT, BOX_HEIGHT))).collect();
    let edges: Vec<(u32, u32)> = graph.edges.iter().map(|&(a, b)| (a as u32, b as u32)).collect();
    let config = rust_sugiyama::configure::Config {
        // The library spaces vertices by their size plus this.
        vertex_spacing: ROW_GAP,
        ..Default::default()
    };
    let layouts = rust_sugiyama::from_vertices_and_edges(&vertices, &edges, &config);
    // One layout per connected part; the neighbourhood is connected through
    // the view, but each part is stacked below the last all the same.
    let mut offset = 0.0;
    for (layout, _, _) in layouts {
        let mut layers: Vec<f64> = layout.iter().map(|(_, (_, y))| *y).collect();
        layers.sort_by(f64::total_cmp);
        layers.dedup();
        let least = layout.iter().map(|(_, (x, _))| *x).fold(f64::INFINITY, f64::min);
        let mut most: f64 = 0.0;
        for (id, (x, y)) in &layout {
            let column = layers.iter().position(|layer| layer == y).unwrap_or(0) as f64;
            // The library puts the first layer at the top; upstream is drawn on the left.
            let across = x - least + offset;
            most = most.max(across);
            if let Some(slot) = placed.get_mut(*id) {
                *slot = (column * (BOX_WIDTH + COLUMN_GAP), across);
            }
        }
        offset = most + BOX_HEIGHT + ROW_GAP;
    }
    placed
}

/// The neighbourhood as an SVG element: a box per view, coloured by its
/// state, linking to its page, with arrows from dependencies to dependents.
pub fn svg(graph: &Neighbourhood, link: impl Fn(&str) -> String) -> String {
    let placed = positions(graph);
    let margin = 4.0;
    let width = placed.iter().map(|(x, _)| x + BOX_WIDTH).fold(BOX_WIDTH, f64::max) + 2.0 * margin;
    let height = placed.iter().map(|(_, y)| y + BOX_HEIGHT).fold(BOX_HEIGHT, f64::max) + 2.0 * margin;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="group" aria-label="{} views around this one">"#,
        graph.nodes.len()
    );
    out.push_str(r#"<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z"/></marker></defs>"#);
    for &(from, to) in &graph.edges {
        let (x1, y1) = placed[from];
        let (x2, y2) = placed[to];
        let (x1, y1) = (x1 + BOX_WIDTH + margin, y1 + BOX_HEIGHT / 2.0 + margin);
        let (x2, y2) = (x2 + margin, y2 + BOX_HEIGHT / 2.0 + margin);
        let middle = (x1 + x2) / 2.0;
        let _ = write!(
            out,
            r#"<path class="edge" d="M{x1:.1},{y1:.1}C{middle:.1},{y1:.1} {middle:.1},{y2:.1} {x2:.1},{y2:.1}" marker-end="url(#arrow)"/>"#
        );
    }
    for (index, node) in graph.nodes.iter().enumerate() {
        let (x, y) = placed[index];
        let (x, y) = (x + margin, y + margin);
        let label = shorten(&node.url);
        let class = if index == 0 { " center" } else { "" };
        let _ = write!(
            out,
            r#"<a href="{href}" class="node{class}" data-view="{url}" data-level="{level}"><title>{url} ({state})</title><rect class="state-{state}" x="{x:.1}" y="{y:.1}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="4"/><text x="{tx:.1}" y="{ty:.1}">{label}</text></a>"#,
            href = escape(&link(&node.url)),
            url = escape(&node.url),
            state = node.state.as_str(),
            level = node.level,
            tx = x + 6.0,
            ty = y + BOX_HEIGHT / 2.0 + 4.0,
            label = escape(&label),
        );
    }
    out.push_str("</svg>");
    out
}

/// A URL path that fits a box: its end, where the parameters are.
fn shorten(url: &str) -> String {
    let count = url.chars().count();
    if count <= LABEL_CHARS {
        return url.to_string();
    }
    let tail: String = url.chars().skip(count - (LABEL_CHARS - 1)).collect();
    format!("…{tail}")
}

fn escape(text: &str) -> String {
    maud::html! { (text) }.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::table::ViewRow;
    use std::sync::Arc;

    fn table(rows: Vec<ViewRow>) -> Table {
        let mut table = Table::default();
        rows.into_iter().for_each(|row| table.push(row));
        table
    }

    fn row(url: &str, state: ViewState, dependencies: &[u32]) -> ViewRow {
        ViewRow {
            url: Arc::from(url),
            view_type: Arc::from("T"),
            state,
            timestamp: None,
            incomplete: false,
            errors: false,
            invalidation_pending: false,
            last_error: None,
            network_retry: None,
            counters: None,
            version_checksum: None,
            dependencies: dependencies.into(),
            data_path: Default::default(),
        }
    }

    /// A chain a <- b <- c <- d <- e, with f beside b: the neighbourhood of
    /// c reaches two levels each way, and every edge between them is drawn.
    #[test]
    fn neighbourhood_reaches_two_levels_each_way() {
        let views = table(vec![
            row("a", ViewState::Materialized, &[]),
            row("b", ViewState::Materialized, &[0]),
            row("c", ViewState::Failed, &[1, 5]),
            row("d", ViewState::Waiting, &[2]),
            row("e", ViewState::Waiting, &[3]),
            row("f", ViewState::NoData, &[]),
            row("g", ViewState::Waiting, &[4]),
        ]);
        let graph = neighbourhood(&views, 2);
        let mut drawn: Vec<(&str, i32)> = graph.nodes.iter().map(|n| (n.url.as_str(), n.level)).collect();
        drawn.sort();
        assert_eq!(drawn, [("a", -2), ("b", -1), ("c", 0), ("d", 1), ("e", 2), ("f", -1)]);
        let named: HashSet<(&str, &str)> =
            graph.edges.iter().map(|&(a, b)| (graph.nodes[a].url.as_str(), graph.nodes[b].url.as_str())).collect();
        assert_eq!(named, HashSet::from([("a", "b"), ("b", "c"), ("f", "c"), ("c", "d"), ("d", "e")]));
        let svg = svg(&graph, |url| format!("#/view/{url}"));
        assert!(svg.contains(r##"href="#/view/a""##), "{svg}");
        assert!(svg.contains(r#"class="state-failed""#), "{svg}");
        assert_eq!(svg.matches("<path class=\"edge\"").count(), 5);
    }

    /// The table keeps who depends on whom as views are added and
    /// rewired, in whatever order dependencies and dependents come.
    #[test]
    fn dependents_follow_a_rewired_view() {
        let mut views = table(vec![
            row("latest", ViewState::Materialized, &[1]),
            row("day/1", ViewState::Materialized, &[]),
            row("day/2", ViewState::Materialized, &[]),
        ]);
        assert_eq!((views.dependents(1), views.dependents(2)), (&[0][..], &[][..]));
        views.set_dependencies(0, [2].into());
        assert_eq!((views.dependents(1), views.dependents(2)), (&[][..], &[0][..]));
        assert_eq!(views.index_of("day/2"), Some(2));
        assert_eq!(views.index_of("day/3"), None);
        let graph = neighbourhood(&views, 2);
        let drawn: Vec<(&str, i32)> = graph.nodes.iter().map(|n| (n.url.as_str(), n.level)).collect();
        assert_eq!(drawn, [("day/2", 0), ("latest", 1)]);
    }

    /// Past the cap, views are counted rather than drawn.
    #[test]
    fn a_wide_fan_is_capped_and_counted() {
        let mut views = vec![row("center", ViewState::Waiting, &(1..=100).collect::<Vec<u32>>())];
        for i in 1..=100 {
            views.push(row(&format!("day/{i}"), ViewState::Materialized, &[]));
        }
        let graph = neighbourhood(&table(views), 0);
        assert_eq!(graph.nodes.len(), 1 + PER_SIDE);
        assert_eq!(graph.hidden_upstream, 100 - PER_SIDE);
        assert_eq!(graph.hidden_downstream, 0);
        // Laid out without overlapping boxes.
        let placed = positions(&graph);
        let mut rows: Vec<f64> = placed[1..].iter().map(|(_, y)| *y).collect();
        rows.sort_by(f64::total_cmp);
        assert!(rows.windows(2).all(|pair| pair[1] - pair[0] >= BOX_HEIGHT), "{rows:?}");
    }

    #[test]
    fn long_urls_keep_their_end() {
        let url = "shop.datamart/DailySalesByProductCategory/SHOP10/2015/05/01";
        let short = shorten(url);
        assert_eq!(short.chars().count(), LABEL_CHARS);
        assert!(short.ends_with("SHOP10/2015/05/01"));
    }
}
