//! Names of nodes and links, so that a user can point at one (`faults: [{link: leaf0-spine3}]`),
//! and the random choice of fabric links to fail.
//!
//! A host is `gpu<i>`, an NVSwitch `nvs<i>` (its server), a packet switch is named by its tier,
//! `leaf<i>` (tier 1: leaf, ToR, edge), `spine<i>` (tier 2: spine, aggregation), `core<i>`
//! (tier 3) or `sw<t>_<i>` beyond, numbered inside its tier in node order. A directed link is
//! `a->b`; a cable (both directions) is `a-b`. Parallel cables between two switches get `#k`
//! (`a->b#1`), the first none.

use std::collections::HashMap;

use llmsim_core::{LinkId, NodeId, SimRng};

use crate::TopoError;
use crate::graph::{LinkKind, NodeKind, Topology};

/// Every node's name, indexed by node id.
pub fn node_names(t: &Topology) -> Vec<String> {
    let mut count: HashMap<(u8, u8), u32> = HashMap::new();
    t.nodes()
        .iter()
        .enumerate()
        .map(|(i, k)| match *k {
            NodeKind::Host => format!("gpu{i}"),
            NodeKind::NvSwitch => {
                let c = count.entry((1, 0)).or_insert(0);
                *c += 1;
                format!("nvs{}", *c - 1)
            }
            NodeKind::Switch { tier } => {
                let c = count.entry((2, tier)).or_insert(0);
                *c += 1;
                let j = *c - 1;
                match tier {
                    1 => format!("leaf{j}"),
                    2 => format!("spine{j}"),
                    3 => format!("core{j}"),
                    _ => format!("sw{tier}_{j}"),
                }
            }
        })
        .collect()
}

/// Every link's name (`a->b`, `a->b#k` for the k-th parallel one), indexed by link id.
pub fn link_names(t: &Topology) -> Vec<String> {
    let nodes = node_names(t);
    let mut seen: HashMap<(NodeId, NodeId), u32> = HashMap::new();
    t.links()
        .iter()
        .map(|l| {
            let k = seen.entry((l.src, l.dst)).or_insert(0);
            *k += 1;
            let base = format!("{}->{}", nodes[l.src.idx()], nodes[l.dst.idx()]);
            if *k == 1 { base } else { format!("{base}#{}", *k - 1) }
        })
        .collect()
}

/// The links `name` denotes: `a->b` one direction, `a-b` (or `a<->b`) both; `field` names the
/// scenario field in the error.
///
/// # Errors
/// `TopoError::Invalid` naming `field` when no link has that name, with examples of names.
pub fn resolve_link(t: &Topology, names: &[String], field: &str, name: &str) -> Result<Vec<LinkId>, TopoError> {
    let name = name.trim();
    let directed = |n: &str| names.iter().position(|x| x == n).map(LinkId::from_idx);
    let mut out = Vec::new();
    if let Some(l) = directed(name) {
        out.push(l);
    } else if let Some((a, rest)) = name
        .split_once("<->")
        .or_else(|| name.split_once('-').filter(|(_, b)| !b.starts_with('>')))
    {
        let (b, tag) = match rest.split_once('#') {
            Some((b, k)) => (b, format!("#{k}")),
            None => (rest, String::new()),
        };
        let (a, b) = (a.trim(), b.trim());
        let fwd = format!("{a}->{b}{tag}");
        let back = format!("{b}->{a}{tag}");
        out.extend(directed(&fwd));
        out.extend(directed(&back));
    }
    if out.is_empty() {
        let sample: Vec<&str> = t
            .links()
            .iter()
            .zip(names)
            .filter(|(l, _)| l.kind == LinkKind::Fabric)
            .map(|(_, n)| n.as_str())
            .take(3)
            .collect();
        return Err(TopoError::invalid(
            field,
            format!(
                "no link named {name:?}; name a directed link (e.g. {}) or a cable a-b; `llmsim topo --describe --links` lists them",
                if sample.is_empty() {
                    "gpu0->leaf0".to_string()
                } else {
                    sample.join(", ")
                }
            ),
        ));
    }
    Ok(out)
}

/// The node named `name` (e.g. `spine3`).
///
/// # Errors
/// `TopoError::Invalid` naming `field` when no node has that name.
pub fn resolve_node(t: &Topology, field: &str, name: &str) -> Result<NodeId, TopoError> {
    node_names(t)
        .iter()
        .position(|x| x == name.trim())
        .map(NodeId::from_idx)
        .ok_or_else(|| {
            TopoError::invalid(
                field,
                format!("no node named {name:?}; switches are leaf<i>, spine<i>, core<i> (see `llmsim topo --describe --links`)"),
            )
        })
}

/// `n` fabric cables (switch-to-switch, both directions) drawn uniformly without replacement
/// with `seed`: the links of both directions, cable by cable.
///
/// # Errors
/// `TopoError::Invalid` naming `field` when the fabric has fewer than `n` cables.
pub fn random_fabric_cables(t: &Topology, n: u32, seed: u64, field: &str) -> Result<Vec<LinkId>, TopoError> {
    let mut rev: HashMap<(NodeId, NodeId), Vec<LinkId>> = HashMap::new();
    for (i, l) in t.links().iter().enumerate() {
        if l.kind == LinkKind::Fabric {
            rev.entry((l.src, l.dst)).or_default().push(LinkId::from_idx(i));
        }
    }
    // A cable: the k-th `a -> b` link with a < b and the k-th `b -> a` one.
    let mut cables: Vec<(LinkId, Option<LinkId>)> = Vec::new();
    for (&(a, b), ls) in &rev {
        if a < b {
            let back = rev.get(&(b, a));
            for (k, &l) in ls.iter().enumerate() {
                cables.push((l, back.and_then(|v| v.get(k).copied())));
            }
        }
    }
    cables.sort_unstable();
    if n as usize > cables.len() {
        return Err(TopoError::invalid(
            field,
            format!(
                "{n} random links asked for, but the fabric has {} switch-to-switch cables",
                cables.len()
            ),
        ));
    }
    let mut rng = SimRng::seed(seed);
    rng.shuffle(&mut cables);
    Ok(cables[..n as usize]
        .iter()
        .flat_map(|&(a, b)| std::iter::once(a).chain(b))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TopologySpec;
    use crate::graph::ScaleUp;

    #[test]
    fn names_round_trip_and_cables_resolve_to_both_directions() {
        let t = TopologySpec::default().build(64, ScaleUp::none(), 1).unwrap();
        let names = link_names(&t);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(resolve_link(&t, &names, "f", n).unwrap(), vec![LinkId::from_idx(i)], "{n}");
        }
        let fabric = t.links().iter().position(|l| l.kind == LinkKind::Fabric).unwrap();
        let (a, b) = names[fabric].split_once("->").unwrap();
        let both = resolve_link(&t, &names, "f", &format!("{a}-{b}")).unwrap();
        assert_eq!(both.len(), 2);
        assert!(both.iter().all(|l| t.link(*l).kind == LinkKind::Fabric));
        let e = resolve_link(&t, &names, "faults[0].link", "leaf0-nowhere").unwrap_err().to_string();
        assert!(e.contains("faults[0].link") && e.contains("leaf0-nowhere"), "{e}");
    }

    #[test]
    fn random_cables_are_distinct_fabric_pairs_and_seeded() {
        let t = TopologySpec::default().build(256, ScaleUp::none(), 1).unwrap();
        let a = random_fabric_cables(&t, 16, 7, "f").unwrap();
        assert_eq!(a, random_fabric_cables(&t, 16, 7, "f").unwrap());
        assert_ne!(a, random_fabric_cables(&t, 16, 8, "f").unwrap());
        assert_eq!(a.len(), 32);
        let mut s = a.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), 32);
        for pair in a.chunks(2) {
            let (x, y) = (t.link(pair[0]), t.link(pair[1]));
            assert_eq!((x.src, x.dst), (y.dst, y.src));
            assert_eq!(x.kind, LinkKind::Fabric);
        }
        assert!(
            random_fabric_cables(&t, 1_000_000, 7, "faults[2].links.random")
                .unwrap_err()
                .to_string()
                .contains("faults[2].links.random")
        );
    }
}
