//! Twins and mirrors: partitions that repeat a leader's history (the same graph and start)
//! follow it instead of being simulated again, and their outcome is resolved from it.

use super::*;

impl PacketEngine {
    /// Leader flow `f` finished: the matching flow of each of its mirrored twins finishes now
    /// too, and a twin whose flows are all done thaws.
    pub(super) fn ww_mirror_finish(&mut self, w: &mut Wormhole, f: u32) {
        let Some(m) = w.memo.as_mut() else { return };
        let g = m.mirror_of.get(f as usize).copied().unwrap_or(NONE);
        if g == NONE {
            return;
        }
        m.mirror_of[f as usize] = NONE;
        let mi = &mut m.mirrors[g as usize];
        let Some(k) = mi.leaders.iter().position(|&x| x == f) else { return };
        if let Some(r) = mi.record.as_mut() {
            r.finish[k] = (self.now_ps() - r.t_base).max(1);
            r.cc[k] = crate::packet::cc::snapshot(self.flow(f));
        }
        let followers = mi.followers.clone();
        let ended = mi.leaders.iter().all(|&x| self.flow(x).done);
        if ended {
            mi.live = false;
            mi.followers.clear();
            // A clean run to its last completion: store each flow's completion offset (in
            // `bytes`: the sizes are in the key).
            if let Some(r) = mi.record.take() {
                let value = MemoValue {
                    t_conv_ps: r.finish.iter().copied().max().unwrap_or(0),
                    flows: r
                        .order
                        .iter()
                        .map(|&j| MemoFlow {
                            bytes: r.finish[j as usize],
                            rate_bps: 0.0,
                            cc: r.cc[j as usize],
                        })
                        .collect(),
                };
                m.store(&mut w.stats, r.hash, r.graph, value);
            }
        }
        for (s, g) in followers.iter().copied() {
            let si = s as usize;
            if !w.slots[si].live || w.slots[si].generation != g || w.slots[si].twin.is_none() {
                continue;
            }
            let t = w.slots[si].flows[k];
            if self.flow(t).done {
                continue;
            }
            self.ww_mirror_complete(w, t, w.slots[si].t0);
            if w.slots[si].flows.iter().all(|&x| self.flow(x).done) {
                w.stats.memo_hits += 1;
                self.ww_resume(w, s);
            } else {
                self.ww_slot_shrink(w, s);
            }
        }
        // The leader's last flow is done: its outcome is known, and nothing else will end a
        // twin that still waits (flows with no counterpart), so it resumes on packets now
        // rather than at the watchdog's deadline.
        if ended {
            for (s, g) in followers {
                let sl = &w.slots[s as usize];
                if sl.live && sl.generation == g && sl.twin.is_some() {
                    w.stats.memo_misses += 1;
                    self.ww_resume(w, s);
                }
            }
        }
    }

    /// Twin flow `t`, frozen since `t0`, finishes now without packets: all its bytes count as
    /// delivered and acknowledged.
    pub(super) fn ww_mirror_complete(&mut self, w: &mut Wormhole, t: u32, t0: u64) {
        let fl = self.flow_mut(t);
        let (size, una, rx) = (fl.size, fl.snd_una, fl.rx_expected);
        fl.snd_una = size;
        fl.snd_nxt = size;
        fl.max_sent = size;
        fl.rx_expected = size;
        self.count_delivered(size - rx.min(size));
        w.stats.skipped_bytes += size - una.min(size);
        let d = self.now_ps().saturating_sub(t0);
        w.log.push(SkipRecord {
            flow: t,
            start: SimTime::from_ps(t0),
            end: SimTime::from_ps(self.now_ps()),
            rate_bps: if d > 0 {
                (size - una.min(size)) as f64 * 8e12 / d as f64
            } else {
                0.0
            },
            bytes: size - una.min(size),
        });
        self.finish_flow(t);
        w.dirty = true;
        for &l in self.flow_links(t) {
            w.touch_link(l);
        }
        for &l in self.flow_paths(t).1 {
            w.ack_users[l as usize] -= 1;
        }
        if let Some(m) = w.memo.as_mut() {
            let twins = end_episode(m, t);
            debug_assert!(twins.is_empty(), "a twin leads no episode");
        }
        self.memo_touch(w, t);
    }

    /// Ends the wait of deferred twins (frozen slot, generation; stale ones are skipped). With
    /// their leader's stored outcome (transient time, per-flow bytes, steady rate and CC state in
    /// the twins' flow order) each becomes the memo hit it would have been at its start: frozen
    /// through the transient and the steady stretch after it. Without one (the leader's episode
    /// ended unsteady) each resumes now where its leader stands.
    pub(super) fn ww_resolve_twins(&mut self, w: &mut Wormhole, twins: &[(u32, u32)], outcome: Option<&(u64, Vec<MemoFlow>)>) {
        for &(s, g) in twins {
            let si = s as usize;
            if !w.slots[si].live || w.slots[si].generation != g || w.slots[si].twin.is_none() {
                continue;
            }
            let planned = outcome.and_then(|(t_conv, per)| {
                let flows = &w.slots[si].flows;
                let mut skip = u64::MAX;
                let mut rates = Vec::with_capacity(flows.len());
                for (k, &f) in flows.iter().enumerate() {
                    let r = per[k].rate_bps.min(self.payload_cap(f));
                    skip = skip.min(self.steady_room_ps(f, r, per[k].bytes).filter(|_| r > 0.0)?);
                    rates.push(r);
                }
                let plan = MemoPlan {
                    t_conv: *t_conv,
                    bytes: per.iter().map(|p| p.bytes).collect(),
                    cc: per.iter().map(|p| p.cc).collect(),
                    completion: false,
                };
                Some((plan, rates, t_conv.saturating_add(skip) / 1000 * 1000))
            });
            match planned {
                Some((plan, rates, total)) => {
                    let slot = &mut w.slots[si];
                    slot.twin = None;
                    slot.plan = Some(plan);
                    slot.rates = rates;
                    slot.generation = slot.generation.wrapping_add(1);
                    slot.resume_at = (slot.t0 + total).max(self.now_ps());
                    slot.watched = false;
                    let (at, g) = (slot.resume_at, slot.generation);
                    w.stats.memo_hits += 1;
                    self.ww_schedule(at, ev(EV_RESUME, s, g));
                }
                None => {
                    w.stats.memo_misses += 1;
                    self.ww_resume(w, s);
                }
            }
        }
    }

    /// The plan of a deferred twin resumed before its leader's outcome: where the leader
    /// stands now (bytes since they both started, CC state), as a transient that took until now.
    pub(super) fn twin_plan(&self, t: &Twin, t0: u64) -> (MemoPlan, Vec<f64>) {
        let t_conv = self.now_ps().saturating_sub(t0).max(1);
        let bytes: Vec<u64> = t
            .leader
            .iter()
            .zip(&t.una0)
            .map(|(&f, &u0)| self.flow(f).snd_una.saturating_sub(u0))
            .collect();
        let rates = bytes.iter().map(|&b| b as f64 * 8e12 / t_conv as f64).collect();
        let plan = MemoPlan {
            t_conv,
            cc: t.leader.iter().map(|&f| crate::packet::cc::snapshot(self.flow(f))).collect(),
            bytes,
            completion: false,
        };
        (plan, rates)
    }

    /// Before the lookups of an episode check: a mirrored leader's partition that gained flows
    /// keeps each twin whose own partition gained corresponding ones ([`PacketEngine::ww_mirror_match`]),
    /// with them frozen in the twin; the other twins are released (`orphans`). A twin's
    /// partition that gained flows its leader did not is released too.
    pub(super) fn ww_mirror_changes(&mut self, w: &mut Wormhole, m: &mut Memo, groups: &[(u32, u32)], orphans: &mut Vec<(u32, u32)>) {
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let mut gs: Vec<u32> = run.iter().map(|&(_, f)| m.mirror_of[f as usize]).filter(|&g| g != NONE).collect();
            gs.sort_unstable();
            gs.dedup();
            let Some(&g) = gs.first() else { continue };
            if run.iter().all(|&(_, f)| m.mirror_of[f as usize] == g) {
                continue;
            }
            if gs.len() > 1 {
                // Two mirrored leaders' partitions merged: neither is copied any more.
                for g in gs {
                    orphans.extend(end_mirror(m, g));
                }
                continue;
            }
            let members: Vec<u32> = run.iter().map(|&(_, f)| f).collect();
            self.ww_mirror_extend(w, m, g, &members, groups, orphans);
        }
        // Every twin of such a partition, not only the first: a flow that starts on two twins'
        // links (or on a twin's and on running flows') joins them all, and a twin left frozen
        // there parks that flow's packets, and any running flow's, until its own leader ends
        // (at 4,096 GPUs two leaders each stuck on the other's twin: no flow moved until the
        // watchdog).
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let s0 = w.flow_slot[run[0].1 as usize];
            if s0 != NONE && run.iter().all(|&(_, f)| w.flow_slot[f as usize] == s0) {
                continue;
            }
            let from = orphans.len();
            for &(_, f) in run {
                let s = w.flow_slot[f as usize];
                if s != NONE && w.slots[s as usize].mirror {
                    let key = (s, w.slots[s as usize].generation);
                    if !orphans[from..].contains(&key) {
                        orphans.push(key);
                    }
                }
            }
        }
    }

    /// Resumes the twins `ww_mirror_changes` released (`orphans`, emptied) where their leaders
    /// stand, before the episode check's lookups, and adds to `groups` (sorted by root, then
    /// flow) the partitions of released twins that no flow started or finished in: made of
    /// released twins' flows alone (a twin whose leader's partition changed while its own did
    /// not). So every released twin's partition is looked up like a fresh one: a stored
    /// transient skips its way back to steady state, and identical ones released together
    /// (a rail's twins when one replica's flow joined their leader) defer to the first. Before,
    /// they were resumed after the lookups and ran on packets until a sample window looked
    /// steady (on the 1,024-GPU example ~15k packet events per 6.3 MB pipeline send).
    pub(super) fn ww_release_twins(&mut self, w: &mut Wormhole, orphans: &mut Vec<(u32, u32)>, groups: &mut Vec<(u32, u32)>) {
        let mut released: Vec<u32> = Vec::new();
        for &(s, g) in orphans.iter() {
            let sl = &w.slots[s as usize];
            if sl.live && sl.generation == g && sl.twin.is_some() {
                released.extend(sl.flows.iter().copied().filter(|&f| !self.flow(f).done));
            }
        }
        self.ww_resolve_twins(w, orphans, None);
        orphans.clear();
        released.sort_unstable();
        let mut roots: Vec<u32> = released
            .iter()
            .map(|&f| w.root[f as usize])
            .filter(|&r| groups.get(groups.partition_point(|x| x.0 < r)).is_none_or(|x| x.0 != r))
            .collect();
        roots.sort_unstable();
        roots.dedup();
        if roots.is_empty() {
            return;
        }
        let n0 = groups.len();
        // Roots whose partition also holds flows that were not released twins: left alone.
        let mut mixed: Vec<u32> = Vec::new();
        for &f in &w.active {
            let r = w.root[f as usize];
            if roots.binary_search(&r).is_ok() && !self.flow(f).done {
                if released.binary_search(&f).is_ok() {
                    groups.push((r, f));
                } else {
                    mixed.push(r);
                }
            }
        }
        mixed.sort_unstable();
        mixed.dedup();
        let mut k = n0;
        while k < groups.len() {
            if mixed.binary_search(&groups[k].0).is_ok() {
                groups.swap_remove(k);
            } else {
                k += 1;
            }
        }
        groups.sort_unstable();
    }

    /// Leader partition `members` of mirror `g` gained flows: extends the mirror to them in each
    /// twin that gained corresponding ones; releases the others. The mirror ends unless a twin
    /// is kept or, with its history reproducible, only fresh flows joined.
    pub(super) fn ww_mirror_extend(
        &mut self,
        w: &mut Wormhole,
        m: &mut Memo,
        g: u32,
        members: &[u32],
        groups: &[(u32, u32)],
        orphans: &mut Vec<(u32, u32)>,
    ) {
        let gi = g as usize;
        m.mirrors[gi].record = None;
        let mut old = Vec::new();
        let mut new_l = Vec::new();
        for &f in members {
            if m.mirror_of[f as usize] == g {
                old.push(m.mirrors[gi].leaders.iter().position(|&x| x == f).expect("a leader of its mirror"));
            } else {
                new_l.push(f);
            }
        }
        let followers = std::mem::take(&mut m.mirrors[gi].followers);
        let mut kept = Vec::new();
        for (s, gen_) in followers {
            let si = s as usize;
            if !w.slots[si].live || w.slots[si].generation != gen_ || !w.slots[si].mirror {
                continue;
            }
            match self.ww_mirror_match(w, &m.mirrors[gi].leaders, &w.slots[si].flows, &old, &new_l, members.len(), groups) {
                Some(new_t) => kept.push((s, gen_, new_t)),
                None => orphans.push((s, gen_)),
            }
        }
        // With no twin left, the mirror still tracks the leader's history while only fresh
        // flows join it (its joined runs are recorded and replayed under `join_key`).
        if kept.is_empty() && !(m.mirrors[gi].hist.is_some() && new_l.iter().all(|&f| self.ww_fresh(f))) {
            orphans.extend(end_mirror(m, g));
            return;
        }
        for &f in &new_l {
            m.mirror_of[f as usize] = g;
        }
        m.mirrors[gi].joined = true;
        m.joined.push(g);
        m.mirrors[gi].leaders.extend_from_slice(&new_l);
        let leaders = m.mirrors[gi].leaders.clone();
        for (s, gen_, new_t) in kept {
            self.ww_slot_add(w, s, &new_t);
            if let Some(t) = w.slots[s as usize].twin.as_mut() {
                t.leader.clone_from(&leaders);
                t.una0.resize(leaders.len(), 0);
            }
            m.mirrors[gi].followers.push((s, gen_));
        }
    }

    /// The twin's new flows that correspond to the leader's `new_l`, or `None`. The twin's
    /// partition must be its flows at positions `old` of the mirror (those whose leader flows
    /// are in the leader's partition now) plus as many new flows as the leader gained, all fresh,
    /// and paired in submission order they must match flow by flow: size, class, line rate, and
    /// links that correspond one to one with the same rates along the data and ACK paths.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ww_mirror_match(
        &self,
        w: &Wormhole,
        leaders: &[u32],
        twins: &[u32],
        old: &[usize],
        new_l: &[u32],
        n: usize,
        groups: &[(u32, u32)],
    ) -> Option<Vec<u32>> {
        let fresh = |f: u32| self.ww_fresh(f);
        if !new_l.iter().all(|&f| fresh(f)) {
            return None;
        }
        let r = w.root[twins[*old.first()?] as usize];
        let lo = groups.partition_point(|&(x, _)| x < r);
        let hi = groups.partition_point(|&(x, _)| x <= r);
        let t_members = &groups[lo..hi];
        if t_members.len() != n {
            return None;
        }
        let s = w.flow_slot[twins[old[0]] as usize];
        let new_t: Vec<u32> = t_members
            .iter()
            .map(|&(_, f)| f)
            .filter(|&f| w.flow_slot[f as usize] != s)
            .collect();
        if new_t.len() != new_l.len() || new_t.iter().any(|&f| w.flow_slot[f as usize] != NONE || !fresh(f)) {
            return None;
        }
        let mut map: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let mut inv: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let pairs = old
            .iter()
            .map(|&k| (leaders[k], twins[k]))
            .chain(new_l.iter().copied().zip(new_t.iter().copied()));
        for (a, b) in pairs {
            let (fa, fb) = (self.flow(a), self.flow(b));
            if fa.size != fb.size || fa.pg != fb.pg || fa.max_rate != fb.max_rate {
                return None;
            }
            let (la, lb) = (self.flow_links(a), self.flow_links(b));
            if la.len() != lb.len() || fa.path_ack - fa.path_data != fb.path_ack - fb.path_data {
                return None;
            }
            for (&x, &y) in la.iter().zip(lb) {
                if self.link_rate_bps(x) != self.link_rate_bps(y) || *map.entry(x).or_insert(y) != y || *inv.entry(y).or_insert(x) != x {
                    return None;
                }
            }
        }
        Some(new_t)
    }
}
