//! Reverse edges of a dependency DAG stored in compressed sparse rows.

use std::ops::Range;

/// The dependents of every node: node `i`'s dependents are `node[range(i)]`, and `edge[k]` is the
/// index in the forward `deps` array of the edge that `node[k]` came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reversed {
    /// Offsets into `node`: node `i`'s dependents are `node[start[i]..start[i + 1]]`.
    pub start: Vec<u32>,
    /// The dependents, grouped by the node they depend on.
    pub node: Vec<u32>,
    /// For each entry of `node`, the index of its edge in the forward `deps` array.
    pub edge: Vec<u32>,
}

impl Reversed {
    /// Reverses a DAG whose node `i` depends on `deps[dep_start[i]..dep_start[i + 1]]`.
    /// Dependents of a node appear in increasing node order.
    pub fn of(dep_start: &[u32], deps: &[u32]) -> Self {
        let n = dep_start.len().saturating_sub(1);
        let mut start = vec![0u32; n + 1];
        for d in deps {
            start[*d as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut node = vec![0u32; deps.len()];
        let mut edge = vec![0u32; deps.len()];
        for i in 0..n {
            for e in dep_start[i]..dep_start[i + 1] {
                let d = deps[e as usize] as usize;
                let k = fill[d] as usize;
                node[k] = i as u32;
                edge[k] = e;
                fill[d] += 1;
            }
        }
        Reversed { start, node, edge }
    }

    /// Positions in `node`/`edge` of node `i`'s dependents.
    pub fn range(&self, i: u32) -> Range<usize> {
        self.start[i as usize] as usize..self.start[i as usize + 1] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverses_a_diamond() {
        // 0 <- 1, 0 <- 2, {1, 2} <- 3
        let r = Reversed::of(&[0, 0, 1, 2, 4], &[0, 0, 1, 2]);
        assert_eq!(&r.node[r.range(0)], &[1, 2]);
        assert_eq!(&r.node[r.range(1)], &[3]);
        assert_eq!(&r.node[r.range(2)], &[3]);
        assert!(r.range(3).is_empty());
        assert_eq!(&r.edge[r.range(2)], &[3]);
    }
}
