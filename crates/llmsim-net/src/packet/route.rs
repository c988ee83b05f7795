//! ns-3's routing for imported topologies (`third.cc` `CalculateRoute`, `SwitchNode::GetOutDev`):
//! next hops are the BFS shortest paths by hop count, listed in the order BFS dequeues them,
//! and a switch picks one with a Murmur3 hash of `{sip, dip, sport | dport << 16}` seeded with
//! its node id.
//!
//! BFS visits a node's neighbors in the order of a `std::map<Ptr<Node>, ...>`, i.e. by object
//! address. Hosts are small heap objects (ascending address with id); a `SwitchNode` holds a
//! 2 MiB counter array, so glibc maps each one separately, at descending addresses above the
//! heap. Hence the order: hosts by ascending id, then switches by descending id.

use llmsim_core::NodeId;
use llmsim_topo::Topology;

/// Next-hop lists per (node, destination host), CSR.
pub(crate) struct Ns3Routes {
    hosts: u32,
    start: Vec<u32>,
    links: Vec<u32>,
}

impl Ns3Routes {
    pub fn build(topo: &Topology, ns3_ids: &[u32], link_dst: &[u32]) -> Ns3Routes {
        let n = topo.num_nodes();
        let hosts = topo.num_hosts();
        // Neighbors (node, link from here) in ns-3 id order.
        let nbrs: Vec<Vec<(u32, u32)>> = (0..n)
            .map(|v| {
                // A link that is down is left out, as ns-3's `CalculateRoute` skips
                // `nbr2if[..].up == false` (HPCC's `TakeDownLink` recomputes the routes).
                let mut x: Vec<(u32, u32)> = topo
                    .ports(NodeId(v as u32))
                    .iter()
                    .filter(|&&l| !topo.is_link_down(l))
                    .map(|l| (link_dst[l.idx()], l.0))
                    .collect();
                x.sort_by_key(|&(u, _)| {
                    if u < hosts {
                        (0, ns3_ids[u as usize])
                    } else {
                        (1, u32::MAX - ns3_ids[u as usize])
                    }
                });
                x
            })
            .collect();
        // For each (node, host): the list of next-hop links.
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); n * hosts as usize];
        let mut dis = vec![u32::MAX; n];
        let mut queue = Vec::with_capacity(n);
        for h in 0..hosts {
            dis.iter_mut().for_each(|d| *d = u32::MAX);
            queue.clear();
            queue.push(h);
            dis[h as usize] = 0;
            let mut i = 0;
            while i < queue.len() {
                let now = queue[i];
                i += 1;
                let d = dis[now as usize];
                for &(next, _) in &nbrs[now as usize] {
                    if dis[next as usize] == u32::MAX {
                        dis[next as usize] = d + 1;
                        if next >= hosts {
                            queue.push(next);
                        }
                    }
                    if d + 1 == dis[next as usize] {
                        // `next` reaches `h` through `now`: its link toward `now`.
                        if let Some(&(_, l)) = nbrs[next as usize].iter().find(|&&(u, _)| u == now) {
                            lists[next as usize * hosts as usize + h as usize].push(l);
                        }
                    }
                }
            }
        }
        let mut start = Vec::with_capacity(lists.len() + 1);
        let mut links = Vec::new();
        start.push(0);
        for l in &lists {
            links.extend_from_slice(l);
            start.push(links.len() as u32);
        }
        Ns3Routes { hosts, start, links }
    }

    #[inline]
    pub fn next_hop(&self, at: u32, dst: u32, sip: u32, dip: u32, ports: u32, seed: u32) -> Option<u32> {
        let k = at as usize * self.hosts as usize + dst as usize;
        let c = &self.links[self.start[k] as usize..self.start[k + 1] as usize];
        match c.len() {
            0 => None,
            1 => Some(c[0]),
            n => {
                let mut key = [0u8; 12];
                key[0..4].copy_from_slice(&sip.to_le_bytes());
                key[4..8].copy_from_slice(&dip.to_le_bytes());
                key[8..12].copy_from_slice(&ports.to_le_bytes());
                Some(c[murmur3_32(&key, seed) as usize % n])
            }
        }
    }
}

/// MurmurHash3, x86 32-bit variant (Austin Appleby's public-domain algorithm).
pub(crate) fn murmur3_32(key: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut k = 0u32;
        for (i, &b) in rem.iter().enumerate() {
            k |= u32::from(b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= key.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_reference_vectors() {
        // Published test vectors of MurmurHash3_x86_32.
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514E_28B7);
        assert_eq!(murmur3_32(b"test", 0), 0xba6b_d213);
        assert_eq!(murmur3_32(b"Hello, world!", 1234), 0xfaf6_cdb3);
    }
}
