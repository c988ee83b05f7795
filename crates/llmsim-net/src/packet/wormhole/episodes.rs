//! Memo episodes: transients keyed by their flow-conflict graph, recorded from the start of a
//! partition to steady state (or completion), checkpoints, and replays on a hit.

use super::*;

impl PacketEngine {
    /// A run entry's hit: freezes `flows` (fresh, just started, or a joined run's partition) and
    /// finishes each `fin[k]` from now. Until then a flow arriving on their links resumes them on
    /// packets (a skip-back), each having moved its bytes at its stored average rate, with the CC
    /// state it had when it finished in the stored run (not a fresh flow's line rate).
    pub(super) fn ww_replay_freeze(&mut self, w: &mut Wormhole, flows: &[u32], fin: &[u64], cc: Vec<CcSnap>) {
        let left = self.remaining(flows);
        let rates = left.iter().zip(fin).map(|(&b, &t)| b as f64 * 8e12 / t.max(1) as f64).collect();
        let plan = MemoPlan {
            t_conv: fin.iter().copied().max().unwrap_or(0),
            bytes: left,
            cc,
            completion: true,
        };
        let s = self.ww_freeze_slot(w, flows.to_vec(), rates, TWIN_MAX_PS, Some(plan));
        let at: Vec<u64> = fin.iter().map(|&t| self.now_ps() + t).collect();
        let mut times = at.clone();
        times.sort_unstable();
        times.dedup();
        for t in times {
            self.ww_schedule(t, ev(EV_SAMPLE, s, 3));
        }
        w.slots[s as usize].finish = at;
    }

    /// A completion time of replay slot `s`: the flows due by now finish; the slot thaws when
    /// all have, else the links only finished flows used do.
    pub(super) fn ww_replay_finish(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        if !w.slots[si].live || w.slots[si].finish.is_empty() {
            return;
        }
        let t0 = w.slots[si].t0;
        for k in 0..w.slots[si].flows.len() {
            let f = w.slots[si].flows[k];
            if !self.flow(f).done && w.slots[si].finish[k] <= self.now_ps() {
                self.ww_mirror_complete(w, f, t0);
                self.ww_mirror_finish(w, f);
            }
        }
        if w.slots[si].flows.iter().all(|&x| self.flow(x).done) {
            self.ww_resume(w, s);
        } else {
            self.ww_slot_shrink(w, s);
        }
    }

    /// Flow `f` started at this instant and has had nothing acknowledged: a fresh flow, as a
    /// mirror's or a run entry's flows must be.
    pub(super) fn ww_fresh(&self, f: u32) -> bool {
        let fl = self.flow(f);
        fl.start == self.now_ps() && fl.snd_una == 0
    }

    /// Bytes each flow has left to acknowledge.
    pub(super) fn remaining(&self, flows: &[u32]) -> Vec<u64> {
        flows
            .iter()
            .map(|&f| {
                let fl = self.flow(f);
                fl.size - fl.snd_una.min(fl.size)
            })
            .collect()
    }

    /// `f` finished inside an open episode (the first completion since the flow set changed),
    /// after its checkpoint: stores the stretch from the checkpoint to here, keyed by the graph,
    /// every flow's bytes left at the episode's start and the checkpoint delay.
    pub(super) fn memo_record_completion(&mut self, w: &mut Wormhole, f: u32) {
        let m = w.memo.as_mut().expect("memo on");
        let Some(&k) = m.episode_of.get(f as usize) else { return };
        if k == NONE {
            return;
        }
        let ep = &m.episodes[k as usize];
        if ep.flows.len() > COMPLETION_MAX_FLOWS || ep.replay.is_some() || ep.t_check == 0 || self.now_ps() <= ep.t_check {
            return;
        }
        let t_c = self.now_ps() - ep.t_check;
        let rem: Vec<u64> = ep.flows.iter().zip(&ep.una).map(|(&g, &u0)| self.flow(g).size - u0).collect();
        let (cg, ch, corder) = completion_key(&ep.graph, &rem, ep.delta);
        let flows = corder
            .iter()
            .map(|&v| {
                let fl = self.flow(ep.flows[v as usize]);
                let b = fl.snd_una.min(fl.size) - ep.una_check[v as usize];
                MemoFlow {
                    bytes: b,
                    rate_bps: b as f64 * 8.0 / (t_c as f64 * 1e-12),
                    cc: crate::packet::cc::snapshot(fl),
                }
            })
            .collect();
        let value = MemoValue { t_conv_ps: t_c, flows };
        m.store(&mut w.stats, ch, cg, value);
    }

    /// An episode's checkpoint: a recording one notes where its flows stand; a replay freezes
    /// its partition along the stored stretch.
    pub(super) fn ww_checkpoint(&mut self, w: &mut Wormhole, k: u32) {
        let mut m = w.memo.take().expect("memo on");
        let ki = k as usize;
        if ki < m.episodes.len() && m.episodes[ki].live && m.episodes[ki].t_s + m.episodes[ki].delta == self.now_ps() {
            let ep = &mut m.episodes[ki];
            ep.t_check = self.now_ps();
            ep.una_check = ep.flows.iter().map(|&f| self.flow(f).snd_una).collect();
            if let Some((t_c, per)) = ep.replay.take() {
                let flows = std::mem::take(&mut ep.flows);
                ep.live = false;
                for &f in &flows {
                    m.episode_of[f as usize] = NONE;
                }
                if self.ww_memo_completion(w, &flows, t_c, &per) {
                    w.stats.memo_hits += 1;
                } else {
                    w.stats.memo_misses += 1;
                }
            }
        }
        w.memo = Some(m);
    }

    /// Marks `f`'s links for the episode check, scheduled at this instant after the events
    /// already queued for it (so flows starting together form one episode).
    pub(super) fn memo_touch(&mut self, w: &mut Wormhole, f: u32) {
        let Some(m) = w.memo.as_mut() else { return };
        for &l in self.flow_links(f) {
            if !m.touched[l as usize] {
                m.touched[l as usize] = true;
                m.touched_list.push(l);
            }
        }
        if !m.check_pending {
            m.check_pending = true;
            self.ww_schedule(self.now_ps(), ev(EV_SAMPLE, 0, 1));
        }
    }

    /// The episode check: every partition whose flow set changed at this instant looks its
    /// flow-conflict graph up; a hit skips the transient, a miss opens an episode.
    pub(super) fn ww_episodes(&mut self, w: &mut Wormhole) {
        let flows = self.flow_table();
        w.active.retain(|&f| !flows[f as usize].done);
        let mut m = w.memo.take().expect("memo on");
        m.check_pending = false;
        if w.dirty {
            // Flows only finished, and only in partitions far too large to memoize (an
            // all-to-all of thousands of flows): what they split into cannot be looked up
            // before many more finish, and a sample tick repartitions before then. Skip the
            // repartition (it walks every running flow's path: at every completion instant of
            // a 128-GPU all-to-all it made a memo run 2.5x slower than the exact engine).
            // (A touched link no flow sent data over at the last repartition, on an ACK path
            // only, is in no partition: size 0.)
            if !w.merged
                && m.touched_list.iter().all(|&l| {
                    let r = w.find(l);
                    let n = w.part_size[r as usize] as usize;
                    n == 0 || n > SPLIT_DEFER_FLOWS
                })
            {
                for &l in &m.touched_list {
                    m.touched[l as usize] = false;
                }
                m.touched_list.clear();
                w.memo = Some(m);
                return;
            }
            self.ww_repartition(w);
        }
        for &l in &m.touched_list {
            let r = w.find(l);
            m.root_mark[r as usize] = true;
        }
        let mut groups = std::mem::take(&mut w.scratch);
        groups.clear();
        groups.extend(
            w.active
                .iter()
                .filter(|&&f| m.root_mark[w.root[f as usize] as usize])
                .map(|&f| (w.root[f as usize], f)),
        );
        for &l in &m.touched_list {
            m.touched[l as usize] = false;
            let r = w.find(l);
            m.root_mark[r as usize] = false;
        }
        m.touched_list.clear();
        groups.sort_unstable();
        let mut orphans = Vec::new();
        self.ww_mirror_changes(w, &mut m, &groups, &mut orphans);
        // Released twins resume now, before the lookups, which then take their partitions too.
        self.ww_release_twins(w, &mut orphans, &mut groups);
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let members: Vec<u32> = run.iter().map(|&(_, f)| f).collect();
            for &f in &members {
                orphans.extend(end_episode(&mut m, f));
            }
            // A mirrored leader's partition that fresh flows joined, holding all its running
            // flows: its history continues (replayed or recorded below).
            let jm = m.mirror_of[members[0] as usize];
            let jm = (jm != NONE
                && m.mirrors[jm as usize].joined
                && members.iter().all(|&f| m.mirror_of[f as usize] == jm)
                && m.mirrors[jm as usize].leaders.iter().filter(|&&f| !self.flow(f).done).count() == members.len())
            .then_some(jm);
            if members.len() > MEMO_MAX_FLOWS || members.iter().any(|&f| w.flow_slot[f as usize] != NONE) {
                continue;
            }
            let (graph, hash, order) = self.fcg(w, &members);
            let flows: Vec<u32> = order.iter().map(|&v| members[v as usize]).collect();
            if let Some(g) = jm {
                m.mirrors[g as usize].joined = false;
            }
            if let Some(g) = jm
                && let Some(hist) = m.mirrors[g as usize].hist
            {
                let gi = g as usize;
                let (jg, jh, jorder) = self.join_key(&flows, m.mirrors[gi].t_s, hist);
                m.mirrors[gi].hist = Some(jh);
                if let Some((val, map)) = m.db.lookup(m.context, jh, &jg) {
                    // Stored: each flow's completion offset from the join, and its CC state then.
                    let (fin, cc) = stored_run(val, &map, &jorder, flows.len());
                    self.ww_replay_freeze(w, &flows, &fin, cc);
                    w.stats.memo_hits += 1;
                    continue;
                }
                let mi = &mut m.mirrors[gi];
                let n = mi.leaders.len();
                let order = jorder
                    .iter()
                    .map(|&v| {
                        let f = flows[v as usize];
                        mi.leaders.iter().position(|&x| x == f).expect("a leader of its mirror") as u32
                    })
                    .collect();
                mi.record = Some(RunRecord::new(self.now_ps(), jh, jg, order, n));
            }
            let fresh_all = flows.iter().all(|&f| self.ww_fresh(f));
            // A partition of fresh flows that started at this instant with an identical one
            // (same graph, same sizes flow by flow): mirror that leader instead of simulating
            // the same dynamics again (one rail's share of an all-to-all or of a DP ring).
            if fresh_all
                && let Some(g) = m.mirrors.iter().position(|x| {
                    x.live
                        && x.t_s == self.now_ps()
                        && x.hash == hash
                        && x.graph == graph
                        && x.leaders
                            .iter()
                            .zip(&flows)
                            .all(|(&a, &b)| self.ww_fresh(a) && self.flow(a).size == self.flow(b).size)
                })
            {
                let leaders = m.mirrors[g].leaders.clone();
                let s = self.ww_freeze_slot(w, flows.clone(), vec![0.0; flows.len()], TWIN_MAX_PS, None);
                w.slots[s as usize].twin = Some(Twin {
                    una0: vec![0; leaders.len()],
                    leader: leaders,
                });
                w.slots[s as usize].mirror = true;
                m.mirrors[g].followers.push((s, w.slots[s as usize].generation));
                w.stats.memo_deferred += 1;
                continue;
            }
            // A partition of fresh flows: the key of its run (its graph weighed by the sizes),
            // which starts the history of the mirror it leads.
            let start = fresh_all.then(|| {
                let sizes: Vec<u64> = flows.iter().map(|&f| self.flow(f).size).collect();
                run_key(&graph, &sizes)
            });
            let plan = m.db.lookup(m.context, hash, &graph).map(|(val, map)| {
                let per: Vec<MemoFlow> = (0..flows.len()).map(|v| val.flows[map[v] as usize]).collect();
                (val.t_conv_ps, per)
            });
            if let Some((t_conv, per)) = plan
                && self.ww_memo_freeze(w, &flows, t_conv, &per)
            {
                w.stats.memo_hits += 1;
                if let Some((_, sh, _)) = start {
                    // Frozen on its stored transient, it still leads the same-instant twins.
                    new_mirror(&mut m, flows, self.now_ps(), hash, graph, Some(sh));
                }
                continue;
            }
            // An episode that ended in a completion, with the same flows and bytes left: replay
            // it from its checkpoint on (the flows run on packets until then).
            let delta = flows.iter().map(|&f| self.own_rtt_ns(f)).max().unwrap_or(0) * 1000;
            let (cg, ch, corder) = completion_key(&graph, &self.remaining(&flows), delta);
            let replay = (flows.len() <= COMPLETION_MAX_FLOWS)
                .then(|| m.db.lookup(m.context, ch, &cg))
                .flatten()
                .map(|(val, map)| {
                    // Flow vertex i of the completion graph is flow corder[i] of `flows`.
                    let mut per = vec![MemoFlow::default(); flows.len()];
                    for (i, &v) in corder.iter().enumerate() {
                        per[v as usize] = val.flows[map[i] as usize];
                    }
                    (val.t_conv_ps, per)
                });
            // A twin of a partition that started at this very instant and records its
            // transient: wait for that outcome instead of simulating the same transient again.
            // Only partitions that can reach steady state: each flow, even at its line rate,
            // outlasts a sampling window (a short flow's episode ends in its completion, and a
            // twin resumed from there would pay its last round trip again).
            let window_ps = w.cfg.sample_interval.as_ps() * w.cfg.window as u64;
            let long = flows.iter().all(|&f| {
                let fl = self.flow(f);
                (fl.size - fl.snd_una.min(fl.size)) as f64 * 8.0 / self.payload_cap(f) * 1e12 > window_ps as f64
            });
            // A short partition of fresh flows: the key of its run to its last completion.
            let start_hist = start.as_ref().map(|r| r.1);
            let run = start.filter(|_| replay.is_none() && !long);

            if replay.is_none()
                && long
                && let Some(k) = m
                    .episodes
                    .iter()
                    .position(|x| x.live && x.t_s == self.now_ps() && x.replay.is_none() && x.hash == hash && x.graph == graph)
            {
                let s = self.ww_freeze_slot(w, flows.clone(), vec![0.0; flows.len()], TWIN_MAX_PS, None);
                let ep = &mut m.episodes[k];
                w.slots[s as usize].twin = Some(Twin {
                    leader: ep.flows.clone(),
                    una0: ep.una.clone(),
                });
                ep.followers.push((s, w.slots[s as usize].generation));
                w.stats.memo_deferred += 1;
                continue;
            }
            // A stored run with the same key: replay it (this partition still leads any twins
            // that start with it; if a flow joins, it resumes on packets and they follow it).
            if let Some((rg, rh, rorder)) = &run
                && let Some((val, map)) = m.db.lookup(m.context, *rh, rg)
            {
                let (fin, cc) = stored_run(val, &map, rorder, flows.len());
                self.ww_replay_freeze(w, &flows, &fin, cc);
                new_mirror(&mut m, flows, self.now_ps(), hash, graph, Some(*rh));
                w.stats.memo_hits += 1;
                continue;
            }
            if replay.is_none() {
                w.stats.memo_misses += 1;
            }
            let una = flows.iter().map(|&f| self.flow(f).snd_una).collect();
            let e = Episode {
                live: true,
                t_s: self.now_ps(),
                hash,
                graph,
                flows,
                una,
                delta,
                t_check: 0,
                una_check: Vec::new(),
                replay,
                followers: Vec::new(),
            };
            let k = reuse_or_push(&mut m.episodes, |x| !x.live, e);
            for &f in &m.episodes[k].flows {
                m.episode_of[f as usize] = k as u32;
            }
            // The leader of any twins that start with it (a short one's run is recorded).
            if fresh_all {
                let ep = &m.episodes[k];
                let (leaders, hash, graph) = (ep.flows.clone(), ep.hash, ep.graph.clone());
                let n = leaders.len();
                let g = new_mirror(&mut m, leaders, self.now_ps(), hash, graph, start_hist);
                if let Some((rgraph, rhash, order)) = run {
                    m.mirrors[g].record = Some(RunRecord::new(self.now_ps(), rhash, rgraph, order, n));
                }
            }
            if delta > 0 {
                self.ww_schedule(self.now_ps() + delta, ev(EV_SAMPLE, k as u32, 2));
            }
        }
        // A join not looked up (the leader's flows in several partitions, or one too large or
        // partly frozen) ends the leader's reproducible history.
        for g in std::mem::take(&mut m.joined) {
            let mi = &mut m.mirrors[g as usize];
            if mi.joined {
                mi.joined = false;
                mi.hist = None;
            }
        }
        w.scratch = groups;
        w.memo = Some(m);
        self.ww_resolve_twins(w, &orphans, None);
    }

    /// The canonical flow-conflict graph of `members` (one partition), its hash, and for each
    /// canonical flow vertex the index into `members`.
    pub(super) fn fcg(&self, w: &Wormhole, members: &[u32]) -> (Fcg, u64, Vec<u32>) {
        let descs: Vec<FlowDesc> = members
            .iter()
            .map(|&f| {
                let fl = self.flow(f);
                // The flow's weight: its rate over its line rate in 5% steps (§4.2), its line
                // rate, path delays and bottleneck (the paper leaves path length out; RTT shapes
                // the transient, so it is kept), and whether it has had an ACK yet. The rate is
                // the measured one (its last sample): the CC's own rate variable moves with every
                // ACK under HPCC and TIMELY, so the same situation met it on either side of a
                // step; before its first sample, a flow is weighed by that variable.
                let measured = w.last_rate[f as usize];
                let rate = if measured > 0.0 { measured } else { fl.rate as f64 };
                let step = (rate / fl.max_rate.max(1) as f64 * 20.0).round() as u64;
                let d = self.flow_desc(f, step);
                // The ACK streams (its partition's and others') its data shares links with.
                let acks: u64 = d.data.iter().map(|&l| u64::from(w.ack_users[l as usize])).sum();
                FlowDesc {
                    label: mix(mix(d.label, u64::from(fl.snd_una == 0)), acks),
                    ..d
                }
            })
            .collect();
        let mtu = u64::from(self.wire_mtu_bytes());
        let g = Fcg::build(&descs, |l| {
            // A shared link's weight: its rate and its queue, empty or in powers of two of MTUs.
            let q = self.link_queue_bytes(l) / mtu;
            let qb = if q < 2 { 0 } else { 64 - u64::from(q.leading_zeros()) };
            mix(self.link_rate_bps(l), qb)
        });
        let (hash, order) = g.canonical();
        let canon = g.relabel(&order);
        let nf = members.len();
        (canon, hash, order[..nf].to_vec())
    }

    /// Flow `f`'s data and ACK paths, and a label of `seed` with its line rate, path delays,
    /// bottleneck rate and priority class.
    pub(super) fn flow_desc(&self, f: u32, seed: u64) -> FlowDesc<'_> {
        let fl = self.flow(f);
        let (data, ack) = self.flow_paths(f);
        let delay = |p: &[u32]| p.iter().map(|&l| self.link_delay_ps(l) / 1000).sum::<u64>();
        let bottleneck = data.iter().map(|&l| self.link_rate_bps(l)).min().unwrap_or(0);
        let mut label = mix(seed, fl.max_rate);
        label = mix(label, delay(data));
        label = mix(label, delay(ack));
        label = mix(label, bottleneck);
        // Its priority class: how switches serve it against the other classes.
        label = mix(label, u64::from(fl.pg));
        FlowDesc { label, data, ack }
    }

    /// The key of a mirrored leader's partition that fresh flows joined: its graph with each
    /// flow weighed by its size and its start offset since the leader's fresh start `t_s`, and
    /// each shared link by its rate alone (no live state: a leader replayed from the store and
    /// one simulated on packets, with the same history, must meet the same key), under a hash
    /// that folds in that history `hist` (the run key of the start, then each join's key).
    /// Returns the graph, the hash, and for each of its flow vertices the index into `flows`.
    pub(super) fn join_key(&self, flows: &[u32], t_s: u64, hist: u64) -> (Fcg, u64, Vec<u32>) {
        let descs: Vec<FlowDesc> = flows
            .iter()
            .map(|&f| {
                let fl = self.flow(f);
                let offset = (fl.start - t_s + JOIN_QUANTUM_PS / 2) / JOIN_QUANTUM_PS;
                let d = self.flow_desc(f, JOIN_TAG);
                FlowDesc {
                    label: mix(mix(d.label, fl.size), offset),
                    ..d
                }
            })
            .collect();
        let g = Fcg::build(&descs, |l| self.link_rate_bps(l));
        let (h, order) = g.canonical();
        let nf = flows.len();
        (g.relabel(&order), mix(mix(h, JOIN_TAG), hist), order[..nf].to_vec())
    }

    /// A memo hit: freezes `flows` (canonical order) with the stored transient `per`, then their
    /// stored steady rates. A flow that ends inside the stored transient (an all-to-all that
    /// meets a DP step converges only near its own end) ends the skip pro rata, where its last
    /// stretch is left to packets. False (nothing done) when that point is too close to matter.
    pub(super) fn ww_memo_freeze(&mut self, w: &mut Wormhole, flows: &[u32], t_conv: u64, per: &[MemoFlow]) -> bool {
        let mut skip_ps = u64::MAX;
        let mut rates = Vec::with_capacity(flows.len());
        for (k, &f) in flows.iter().enumerate() {
            let r = per[k].rate_bps.min(self.payload_cap(f));
            if r <= 0.0 {
                return false;
            }
            let t = match self.steady_room_ps(f, r, per[k].bytes) {
                Some(t) => t_conv.saturating_add(t),
                None => {
                    if per[k].bytes == 0 {
                        return false;
                    }
                    let room = self.room_bytes(f, r).unwrap_or(0);
                    (t_conv as f64 * room as f64 / per[k].bytes as f64) as u64
                }
            };
            skip_ps = skip_ps.min(t);
            rates.push(r);
        }
        let plan = MemoPlan {
            t_conv,
            bytes: per.iter().map(|p| p.bytes).collect(),
            cc: per.iter().map(|p| p.cc).collect(),
            completion: false,
        };
        let skip_ps = skip_ps / 1000 * 1000;
        // Cut only the transient's tail: bytes moved pro rata stand in for its real course, which
        // is not linear (a DCQCN start moves at line rate, then backs off); near its end the
        // two meet.
        if skip_ps == 0 || (skip_ps as f64) < PRO_RATA_MIN * t_conv as f64 {
            return false;
        }
        self.ww_freeze_slot(w, flows.to_vec(), rates, skip_ps, Some(plan));
        true
    }

    /// A completion replay at its checkpoint: freezes `flows` and moves them at their stored
    /// rates (`per`: bytes from the checkpoint to the completion `t_c` later), up to where the
    /// first of them has a round trip's worth and a few chunks left (that stretch, and the
    /// completion, run on packets). False when that point is too close to matter.
    pub(super) fn ww_memo_completion(&mut self, w: &mut Wormhole, flows: &[u32], t_c: u64, per: &[MemoFlow]) -> bool {
        if flows.iter().any(|&f| self.flow(f).done || w.flow_slot[f as usize] != NONE) {
            return false;
        }
        let unit = chunk_unit(self.config().chunk, u64::from(self.config().mtu));
        let mut skip_ps = t_c as f64;
        let mut rates = Vec::with_capacity(flows.len());
        for (k, &f) in flows.iter().enumerate() {
            let fl = self.flow(f);
            let r = per[k].rate_bps.min(self.payload_cap(f));
            rates.push(r);
            if r <= 0.0 {
                continue;
            }
            let guard = r * (self.own_rtt_ns(f) * 1000) as f64 * 1e-12 / 8.0 + (8 * unit) as f64;
            let room = fl.size as f64 - fl.max_sent.max(fl.snd_nxt) as f64 - guard;
            skip_ps = skip_ps.min(room * 8.0 / r * 1e12);
        }
        let min_ps = flows.iter().map(|&f| self.own_rtt_ns(f) * 1000).max().unwrap_or(0) * 2;
        // NaN (no flow moved) or too short: not worth a freeze.
        if skip_ps.is_nan() || skip_ps < min_ps.max(1_000_000) as f64 {
            return false;
        }
        let plan = MemoPlan {
            t_conv: t_c,
            bytes: per.iter().map(|p| p.bytes).collect(),
            cc: per.iter().map(|p| p.cc).collect(),
            completion: true,
        };
        self.ww_freeze_slot(w, flows.to_vec(), rates, skip_ps as u64 / 1000 * 1000, Some(plan));
        true
    }

    /// Stores the episode that `flows`, steady now over their last `nsamples` samples, close (if
    /// one is open on exactly them).
    pub(super) fn memo_record(&mut self, w: &mut Wormhole, flows: &[u32], nsamples: usize) {
        let mut m = w.memo.take().expect("memo on");
        let k = m.episode_of[flows[0] as usize];
        if k != NONE
            && m.episodes[k as usize].replay.is_none()
            && m.episodes[k as usize].flows.len() == flows.len()
            && flows.iter().all(|&f| m.episode_of[f as usize] == k)
        {
            let ep = &m.episodes[k as usize];
            let value = MemoValue {
                t_conv_ps: self.now_ps() - ep.t_s,
                flows: ep
                    .flows
                    .iter()
                    .zip(&ep.una)
                    .map(|(&f, &u0)| MemoFlow {
                        bytes: self.flow(f).snd_una - u0,
                        rate_bps: self.steady_rate(w, f, nsamples),
                        cc: crate::packet::cc::snapshot(self.flow(f)),
                    })
                    .collect(),
            };
            let (hash, graph) = (ep.hash, ep.graph.clone());
            let twins = std::mem::take(&mut m.episodes[k as usize].followers);
            let outcome = (value.t_conv_ps, value.flows.clone());
            m.store(&mut w.stats, hash, graph, value);
            let fl = std::mem::take(&mut m.episodes[k as usize].flows);
            for f in fl {
                m.episode_of[f as usize] = NONE;
            }
            m.episodes[k as usize].live = false;
            w.memo = Some(m);
            self.ww_resolve_twins(w, &twins, Some(&outcome));
            return;
        }
        w.memo = Some(m);
    }
}
