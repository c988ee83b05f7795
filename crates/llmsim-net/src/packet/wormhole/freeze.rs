//! Freeze and resume: a steady partition's events parked and its flows fast-forwarded at their
//! measured rates, the watchdog, adding flows to a frozen slot, and the resume that moves every
//! flow, queued packet and parked event past the skipped interval.

use super::*;

impl PacketEngine {
    /// A flow of twin slot `s` finished: the links none of its running flows uses thaw, so other
    /// flows can use them. Their parked events go back to the queue and their ports' clocks move
    /// on, both by the time the slot has been frozen, as a resume would.
    pub(super) fn ww_slot_shrink(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        // Mark the links the slot's running flows use (no allocation: this runs at every
        // completion of a mirrored leader flow, for each twin).
        for &f in &w.slots[si].flows {
            if !self.flow(f).done {
                for &l in self.flow_paths(f).0 {
                    w.link_mark[l as usize] = true;
                }
            }
        }
        let split = (!w.slots[si].links.iter().all(|&l| w.link_mark[l as usize])).then(|| {
            let (gone, kept): (Vec<u32>, Vec<u32>) = w.slots[si].links.iter().partition(|&&l| !w.link_mark[l as usize]);
            (gone, kept)
        });
        for &l in &w.slots[si].links {
            w.link_mark[l as usize] = false;
        }
        let Some((gone, kept)) = split else { return };
        let t0 = w.slots[si].t0;
        let d = (self.now_ps() - t0).div_ceil(1000) * 1000;
        for &l in &gone {
            w.link_slot[l as usize] = NONE;
            self.shift_port_clocks(l, t0, d);
        }
        // The parked events of the thawed links (they belong to no slot now) go back.
        let parked = std::mem::take(&mut w.slots[si].parked);
        let mut keep = Vec::with_capacity(parked.len());
        for (t, seq, e) in parked {
            if self.event_owner(w, e) == s {
                keep.push((t, seq, e));
            } else {
                self.requeue_event(t + d, seq, e);
            }
        }
        w.slots[si].parked = keep;
        w.slots[si].links = kept;
        self.kick_stray_ports(&gone);
    }

    /// R̂ (eq. 7) of flow `f` over its last `nsamples` samples, capped at its payload rate.
    pub(super) fn steady_rate(&self, w: &Wormhole, f: u32, nsamples: usize) -> f64 {
        let mean = window_estimate(last_samples(w, f as usize, nsamples), w.cfg.theta).1;
        mean.min(self.payload_cap(f))
    }

    /// The last stretch of flow `f` left to packets at rate `r`: a few chunks and GUARD_RTTS
    /// base RTTs at `r` (the in-flight data is already below `max_sent`), so the flow finishes
    /// through the packet path with its ACK clock running.
    pub(super) fn guard_bytes(&self, f: u32, r: f64) -> u64 {
        let unit = chunk_unit(self.config().chunk, u64::from(self.config().mtu));
        let guard_ps = GUARD_RTTS * self.own_rtt_ns(f) * 1000;
        (r * guard_ps as f64 * 1e-12 / 8.0) as u64 + 8 * unit
    }

    /// Bytes flow `f` has left to move before the stretch left to packets at rate `r` (`None`:
    /// it is already inside that stretch).
    pub(super) fn room_bytes(&self, f: u32, r: f64) -> Option<u64> {
        let fl = self.flow(f);
        fl.size.checked_sub(fl.max_sent.max(fl.snd_nxt) + self.guard_bytes(f, r))
    }

    /// How long flow `f` can run at `r` after moving `ahead` more bytes before it reaches the
    /// stretch left to packets (`None`: it reaches it first).
    pub(super) fn steady_room_ps(&self, f: u32, r: f64, ahead: u64) -> Option<u64> {
        let room = self.room_bytes(f, r)?.checked_sub(ahead)?;
        let t = room as f64 * 8.0 / r * 1e12;
        Some(if t.is_finite() { t as u64 } else { 0 })
    }

    /// Freezes a steady partition made of `flows` (steady over their last `nsamples` samples),
    /// if its planned skip is worth it.
    pub(super) fn ww_freeze(&mut self, w: &mut Wormhole, flows: Vec<u32>, nsamples: usize) {
        let iv = w.cfg.sample_interval.as_ps();
        let rates: Vec<f64> = flows.iter().map(|&f| self.steady_rate(w, f, nsamples)).collect();
        let mut skip_ps = u64::MAX;
        for (k, &f) in flows.iter().enumerate() {
            skip_ps = skip_ps.min(self.steady_room_ps(f, rates[k], 0).unwrap_or(0));
        }
        if skip_ps < 2 * iv {
            return;
        }
        self.ww_freeze_slot(w, flows, rates, skip_ps / 1000 * 1000, None);
    }

    /// Parks the events of `flows`' links and schedules their resume `skip_ps` from now.
    pub(super) fn ww_freeze_slot(
        &mut self,
        w: &mut Wormhole,
        flows: Vec<u32>,
        rates: Vec<f64>,
        skip_ps: u64,
        plan: Option<MemoPlan>,
    ) -> u32 {
        let mut links = Vec::new();
        for &f in &flows {
            for &l in self.flow_paths(f).0 {
                links.push(l);
            }
        }
        links.sort_unstable();
        links.dedup();
        let s = match w.slots.iter().position(|x| !x.live) {
            Some(s) => s,
            None => {
                w.slots.push(Frozen::default());
                w.slots.len() - 1
            }
        };
        for &k in &links {
            w.link_slot[k as usize] = s as u32;
        }
        for &f in &flows {
            w.flow_slot[f as usize] = s as u32;
        }
        for &l in &links {
            self.ww_release_foreign(w, l);
        }
        let mut parked = std::mem::take(&mut w.slots[s].parked);
        parked.clear();
        self.take_slot_events(w, s as u32, &mut parked);
        let mut acks = std::mem::take(&mut w.slots[s].acks);
        acks.clear();
        for (k, &f) in flows.iter().enumerate() {
            // A twin's rate is its leader's, unknown here: its line rate.
            let r = if rates[k] > 0.0 { rates[k] } else { self.payload_cap(f) };
            self.add_ack_load(f, r, &mut acks);
        }
        let slot = &mut w.slots[s];
        slot.live = true;
        slot.generation = slot.generation.wrapping_add(1);
        slot.t0 = self.now_ps();
        slot.resume_at = self.now_ps() + skip_ps;
        slot.links = links;
        slot.flows = flows;
        slot.rates = rates;
        slot.parked = parked;
        slot.plan = plan;
        slot.twin = None;
        slot.acks = acks;
        slot.mirror = false;
        slot.finish.clear();
        slot.watched = skip_ps >= TWIN_MAX_PS;
        let g = slot.generation;
        w.stats.freezes += 1;
        if skip_ps < TWIN_MAX_PS {
            self.ww_schedule(self.now_ps() + skip_ps, ev(EV_RESUME, s as u32, g));
        } else if w.watchdog == u64::MAX {
            w.watchdog = self.now_ps() + skip_ps;
            self.ww_schedule(w.watchdog, ev(EV_RESUME, WATCHDOG, 0));
        }
        s as u32
    }

    /// The watchdog: resumes the watched slots whose deadline has come (a twin no leader
    /// resolved), and queues itself again for the next deadline.
    #[cold]
    pub(super) fn ww_watchdog(&mut self, w: &mut Wormhole) {
        w.watchdog = u64::MAX;
        let mut next = u64::MAX;
        for s in 0..w.slots.len() {
            let sl = &w.slots[s];
            if !(sl.live && sl.watched) {
                continue;
            }
            if sl.resume_at <= self.now_ps() {
                w.stats.watchdog_resumes += 1;
                self.ww_resume(w, s as u32);
            } else {
                next = next.min(sl.resume_at);
            }
        }
        if next != u64::MAX {
            w.watchdog = next;
            self.ww_schedule(next, ev(EV_RESUME, WATCHDOG, 0));
        }
    }

    /// Freezes `flows` (just started) into mirrored twin slot `s`, frozen since `t0`: their
    /// links join the slot and their queued events are parked. A resume shifts every time of
    /// the slot by how long it was frozen, so what these flows scheduled after `t0` is parked
    /// that much earlier (and their pacing clocks set back), to land at the right time then.
    pub(super) fn ww_slot_add(&mut self, w: &mut Wormhole, s: u32, flows: &[u32]) {
        let si = s as usize;
        let back = self.now_ps() - w.slots[si].t0;
        let mut links = Vec::new();
        for &f in flows {
            w.flow_slot[f as usize] = s;
            for &l in self.flow_paths(f).0 {
                if w.link_slot[l as usize] != s {
                    links.push(l);
                }
            }
        }
        links.sort_unstable();
        links.dedup();
        for &l in &links {
            w.link_slot[l as usize] = s;
            self.set_back_port_clock(l, back);
        }
        for &l in &links {
            self.ww_release_foreign(w, l);
        }
        let mut fresh = Vec::new();
        self.take_slot_events(w, s, &mut fresh);
        let mut acks = std::mem::take(&mut w.slots[si].acks);
        for &f in flows {
            let fl = self.flow_mut(f);
            fl.next_avail = fl.next_avail.saturating_sub(back);
            let r = self.payload_cap(f);
            self.add_ack_load(f, r, &mut acks);
        }
        w.slots[si].acks = acks;
        let slot = &mut w.slots[si];
        slot.parked.extend(fresh.into_iter().map(|(t, q, e)| (t - back, q, e)));
        slot.links.extend_from_slice(&links);
        slot.flows.extend_from_slice(flows);
        slot.rates.resize(slot.flows.len(), 0.0);
    }

    /// Ends the skip of slot `s` now: advances its flows, shifts its times, re-queues its events.
    pub(super) fn ww_resume(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        let t0 = w.slots[si].t0;
        if let Some(t) = w.slots[si].twin.take() {
            let (plan, rates) = self.twin_plan(&t, t0);
            w.slots[si].plan = Some(plan);
            w.slots[si].rates = rates;
        }
        let d = (self.now_ps() - t0).div_ceil(1000) * 1000;
        // The skip ran to its planned end (not cut short by an arrival: a skip-back).
        let planned = self.now_ps() >= w.slots[si].resume_at;
        let d_ns = d / 1000;
        let d_s = d as f64 * 1e-12;
        let mtu = u64::from(self.config().mtu);
        let unit = chunk_unit(self.config().chunk, mtu);
        let generation = w.slots[si].generation;
        let slot = std::mem::replace(
            &mut w.slots[si],
            Frozen {
                generation,
                ..Frozen::default()
            },
        );
        self.remove_ack_load(&slot.acks);
        // Bytes each flow moved during the skip.
        let mut moved = Vec::with_capacity(slot.flows.len());
        let rtt_ns: Vec<u64> = slot.flows.iter().map(|&f| self.own_rtt_ns(f)).collect();
        let var_win = self.config().var_win;
        for (k, &f) in slot.flows.iter().enumerate() {
            let fl = self.flow_mut(f);
            let want = match &slot.plan {
                // A completion replay froze at its checkpoint, windows in flight: linear.
                Some(p) if p.completion => slot.rates[k] * d_s / 8.0,
                Some(p) => {
                    let (moved, r) = if d >= p.t_conv {
                        (
                            p.bytes[k] as f64 + slot.rates[k] * (d - p.t_conv) as f64 * 1e-12 / 8.0,
                            slot.rates[k],
                        )
                    } else {
                        (
                            p.bytes[k] as f64 * d as f64 / p.t_conv as f64,
                            p.bytes[k] as f64 * 8e12 / p.t_conv as f64,
                        )
                    };
                    // The stored bytes are acknowledged ones, but the partition froze with its
                    // own window in flight (none for flows that just started): count the
                    // window the flow would have in flight by now as delivered, or it pays its
                    // start-up round trip twice.
                    let bdp = r * rtt_ns[k] as f64 * 1e-9 / 8.0;
                    let window = match fl.window(var_win) {
                        0 => bdp,
                        w => (w as f64).min(bdp),
                    };
                    moved + (window - (fl.snd_nxt - fl.snd_una) as f64).max(0.0)
                }
                None => slot.rates[k] * d_s / 8.0,
            };
            let want = want as u64 / unit * unit;
            let top = fl.max_sent.max(fl.snd_nxt);
            let cap = (fl.size.saturating_sub(top) / unit).saturating_sub(1) * unit;
            let b = want.min(cap);
            fl.snd_nxt += b;
            fl.snd_una += b;
            fl.max_sent += b;
            fl.rx_expected += b;
            fl.last_nack += b;
            if fl.nack_timer > 0 {
                fl.nack_timer += d;
            }
            fl.next_avail += d;
            fl.cc.fast_forward(b, d_ns);
            self.count_delivered(b);
            w.stats.skipped_bytes += b;
            w.flow_slot[f as usize] = NONE;
            if slot.rates[k] > 0.0 {
                w.last_rate[f as usize] = slot.rates[k];
            }
            w.log.push(SkipRecord {
                flow: f,
                start: SimTime::from_ps(t0),
                end: SimTime::from_ps(t0 + d),
                rate_bps: slot.rates[k],
                bytes: b,
            });
            moved.push((f, b));
        }
        moved.sort_unstable();
        // Queued packets on the partition's ports and NICs' ACK queues.
        let mut queued = Vec::new();
        for &k in &slot.links {
            w.link_slot[k as usize] = NONE;
            queued.clear();
            self.queued_packets(k, &mut queued);
            for &p in &queued {
                self.shift_packet(p, &moved, d_ns);
            }
            self.shift_port_clocks(k, t0, d);
        }
        // The flows' ACKs queued on other partitions' links (their ACK paths; partitions are
        // made of data links).
        for &k in &slot.links {
            w.link_mark[k as usize] = true;
        }
        let mut acks: Vec<u32> = Vec::new();
        for &f in &slot.flows {
            acks.extend(self.flow_paths(f).1.iter().filter(|&&l| !w.link_mark[l as usize]));
        }
        for &k in &slot.links {
            w.link_mark[k as usize] = false;
        }
        acks.sort_unstable();
        acks.dedup();
        for &k in &acks {
            queued.clear();
            self.queued_packets(k, &mut queued);
            for &p in &queued {
                self.shift_packet(p, &moved, d_ns);
            }
        }
        // Packets on the wire, then the parked events themselves.
        for &(_, _, e) in &slot.parked {
            if matches!(events::kind(e), EV_ARRIVE | EV_HOP) {
                self.shift_packet(events::op_b(e), &moved, d_ns);
            }
        }
        for &(t, seq, e) in &slot.parked {
            self.requeue_event(t + d, seq, e);
        }
        w.stats.skipped += SimTime::from_ps(d);
        for &(f, _) in &moved {
            w.nsamp[f as usize] = 0;
            w.last_una[f as usize] = self.flow(f).snd_una;
        }
        self.kick_stray_ports(&slot.links);
        if let Some(p) = &slot.plan
            && (p.completion || d >= p.t_conv || planned)
        {
            for (k, &f) in slot.flows.iter().enumerate() {
                crate::packet::cc::restore(self, f, &p.cc[k]);
            }
        }
        let mut slot = slot;
        slot.parked.clear();
        let keep = &mut w.slots[si];
        keep.parked = slot.parked;
    }
}
