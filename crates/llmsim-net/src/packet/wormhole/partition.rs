//! Partitions and steady state: flows joining and leaving the union-find over their links,
//! repartitioning, and the periodic rate sampling that finds steady partitions (`ww_tick`).

use super::*;

impl PacketEngine {
    #[cold]
    pub(crate) fn ww_on_start(&mut self, f: u32) {
        let mut w = self.ww_slot().take().expect("wormhole on");
        w.grow(self.num_flows());
        w.active.push(f);
        w.nsamp[f as usize] = 0;
        w.last_una[f as usize] = 0;
        w.last_rate[f as usize] = 0.0;
        w.dirty = true;
        w.merged = true;
        for &l in self.flow_links(f) {
            w.touch_link(l);
        }
        for &l in self.flow_paths(f).1 {
            w.ack_users[l as usize] += 1;
        }
        self.memo_touch(&mut w, f);
        if !w.tick_pending {
            w.tick_pending = true;
            let at = self.now_ps() + w.cfg.sample_interval.as_ps();
            self.ww_schedule(at, ev(EV_SAMPLE, 0, 0));
        }
        *self.ww_slot() = Some(w);
    }

    #[cold]
    pub(crate) fn ww_on_finish(&mut self, f: u32) {
        let mut w = self.ww_slot().take().expect("wormhole on");
        w.dirty = true;
        for &l in self.flow_links(f) {
            w.touch_link(l);
        }
        for &l in self.flow_paths(f).1 {
            w.ack_users[l as usize] -= 1;
        }
        if w.memo.is_some() {
            self.memo_record_completion(&mut w, f);
        }
        if let Some(m) = w.memo.as_mut() {
            let twins = end_episode(m, f);
            self.ww_resolve_twins(&mut w, &twins, None);
        }
        self.memo_touch(&mut w, f);
        self.ww_mirror_finish(&mut w, f);
        // Its ACKs no longer cross the data links of the frozen partitions on its ACK path
        // (partitions are made of data links): they resume, as for a flow starting there.
        for i in 0..self.flow_paths(f).1.len() {
            let s = w.link_slot[self.flow_paths(f).1[i] as usize];
            if s != NONE && w.flow_slot[f as usize] != s && w.slots[s as usize].live && !w.slots[s as usize].mirror {
                if self.now_ps() < w.slots[s as usize].resume_at {
                    w.stats.skip_backs += 1;
                }
                self.ww_resume(&mut w, s);
            }
        }
        *self.ww_slot() = Some(w);
    }

    /// Adds (`add`) or removes flow `f`'s ACK path in the links' counts of ACK streams. A
    /// running flow that a link failure routes again moves its count from its old ACK path to
    /// its new one; without that, its finish would uncount links it was never counted on.
    #[cold]
    pub(crate) fn ww_count_acks(&mut self, f: u32, add: bool) {
        let mut w = self.ww_slot().take().expect("wormhole on");
        for &l in self.flow_paths(f).1 {
            let n = &mut w.ack_users[l as usize];
            *n = if add { *n + 1 } else { *n - 1 };
        }
        w.dirty = true;
        *self.ww_slot() = Some(w);
    }

    /// Recomputes the partitions (union-find over the links of the running flows).
    pub(super) fn ww_repartition(&mut self, w: &mut Wormhole) {
        w.dirty = false;
        w.merged = false;
        w.stats.repartitions += 1;
        for (i, x) in w.uf.iter_mut().enumerate() {
            *x = i as u32;
        }
        for k in 0..w.active.len() {
            let f = w.active[k] as usize;
            let links = self.flow_paths(f as u32).0;
            let first = links[0];
            for &l in links {
                let (x, y) = (w.find(first), w.find(l));
                if x != y {
                    w.uf[x as usize] = y;
                }
            }
        }
        w.part_size.fill(0);
        for k in 0..w.active.len() {
            let f = w.active[k] as usize;
            let first = self.flow_links(f as u32)[0];
            w.root[f] = w.find(first);
            w.part_size[w.root[f] as usize] += 1;
        }
    }

    pub(super) fn ww_tick(&mut self, w: &mut Wormhole) {
        w.stats.ticks += 1;
        let l = w.cfg.window;
        let iv = w.cfg.sample_interval.as_ps();
        let iv_s = iv as f64 * 1e-12;
        let flows = self.flow_table();
        w.active.retain(|&f| !flows[f as usize].done);
        // Rate samples of the running, unfrozen flows.
        let mut unfrozen = false;
        for k in 0..w.active.len() {
            let f = w.active[k] as usize;
            if w.flow_slot[f] != NONE {
                continue;
            }
            unfrozen = true;
            let una = self.flow(f as u32).snd_una;
            let r = (una.saturating_sub(w.last_una[f])) as f64 * 8.0 / iv_s;
            w.last_una[f] = una;
            w.last_rate[f] = r;
            let n = w.nsamp[f] as usize;
            w.samples[f * l + n % l] = r;
            w.nsamp[f] = w.nsamp[f].saturating_add(1);
        }
        if w.dirty {
            self.ww_repartition(w);
        }
        // Group the flows by partition; test each for steadiness. With every running flow
        // frozen no group has anything to sample, reset or freeze: skip the grouping (while
        // twins wait for their leaders' ends the tick runs every interval over them all).
        let mut groups = std::mem::take(&mut w.scratch);
        groups.clear();
        if unfrozen {
            groups.extend(w.active.iter().map(|&f| (w.root[f as usize], f)));
        }
        groups.sort_unstable();
        for members in groups.chunk_by(|a, b| a.0 == b.0) {
            let touched = members
                .iter()
                .any(|&(_, f)| self.flow_links(f).iter().any(|&l| w.link_touched[l as usize]));
            let frozen = members.iter().any(|&(_, f)| w.flow_slot[f as usize] != NONE);
            if touched {
                for &(_, f) in members {
                    if w.flow_slot[f as usize] == NONE {
                        w.nsamp[f as usize] = 0;
                    }
                }
            } else if !frozen {
                // Eq. 6 over `window` samples; over the last `uncontended_window` when the
                // partition is uncontended (see `uncontended`), over the last `fair_window`
                // when its flows hold their max-min fair shares (see `at_fair_share`).
                let cc = self.config().cc;
                let k = if w.cfg.uncontended_window < l && uncontended(self, members, &mut w.link_mark) {
                    w.cfg.uncontended_window
                } else if members
                    .iter()
                    .any(|&(_, f)| crate::packet::cc::recovering(cc, self.flow(f), w.cfg.theta))
                {
                    // A contended flow whose CC will raise its rate at a timer longer than the
                    // window (DCQCN's fast recovery): flat samples are the stretch between two
                    // moves of a cycle whose mean is below them. Left to packets.
                    continue;
                } else if w.cfg.fair_window < l && at_fair_share(self, w, members, w.cfg.fair_window) {
                    w.cfg.fair_window
                } else if members.iter().all(|&(_, f)| crate::packet::cc::settles_alone(cc, self.flow(f))) {
                    l
                } else {
                    // A contended partition below its fair shares whose CC raises rates only on
                    // a timer longer than the window (DCQCN under line rate: RP_TIMER, 300 us):
                    // the link idles under flows frozen there (`jobs.rs`' 32-GPU job, seed 2:
                    // three flows at 30-56 Gbit/s of a 400 Gbit/s link frozen for 2 ms).
                    continue;
                };
                if members.iter().all(|&(_, f)| steady(w, f as usize, k)) {
                    let fl: Vec<u32> = members.iter().map(|&(_, f)| f).collect();
                    if w.memo.is_some() {
                        self.memo_record(w, &fl, k);
                    }
                    self.ww_freeze(w, fl, k);
                }
            }
        }
        w.scratch = groups;
        for &l in &w.link_touched_list {
            w.link_touched[l as usize] = false;
        }
        w.link_touched_list.clear();
        if !w.active.is_empty() {
            w.tick_pending = true;
            self.ww_schedule(self.now_ps() + iv, ev(EV_SAMPLE, 0, 0));
        }
    }
}
