//! What the config asks for, laid out for the workers: every link direction with where its
//! frames come from and go to (a veth end, or a port of a switch inside the datapath), the
//! switches' ports, and which worker serves each direction.

use bloatlab_core::fabric::{DirId, Peer, PortSpec};

use crate::config::{Config, EndConfig};

/// Where a direction's frames come from, or go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A veth end in the datapath's namespace: frames in through a ring, out by a socket.
    Iface(String),
    /// A port of a switch served inside the datapath.
    Port { switch: usize, port: usize },
}

#[derive(Clone, Debug)]
pub struct DirPlan {
    /// Its index: link i's forward direction is 2i, its reverse 2i + 1.
    pub id: DirId,
    pub link: usize,
    /// "forward" (a -> b) or "reverse".
    pub which: &'static str,
    pub input: End,
    pub output: End,
    pub worker: usize,
}

impl DirPlan {
    /// "LINK.forward": what its thread was called, and its files are named after.
    pub fn name(&self, cfg: &Config) -> String {
        format!("{}.{}", cfg.links[self.link].name, self.which)
    }
}

pub struct Plan {
    pub dirs: Vec<DirPlan>,
    pub switch_names: Vec<String>,
    /// Each switch's ports, in the order its links come in the config.
    pub switch_ports: Vec<Vec<PortSpec>>,
    pub workers: usize,
}

impl Plan {
    /// `cores` workers at most (the config's `workers` if it gives one), and no more than
    /// there are directions. Errors name the field.
    pub fn new(cfg: &Config, cores: usize) -> Result<Plan, String> {
        let mut switch_names: Vec<String> = Vec::new();
        let mut switch_ports: Vec<Vec<PortSpec>> = Vec::new();
        let mut ifaces: Vec<String> = Vec::new();
        let mut ends = Vec::new();
        for (i, l) in cfg.links.iter().enumerate() {
            let (a, b) = l.ends().map_err(|e| format!("links[{i}].{e}"))?;
            for (side, e) in [("a", &a), ("b", &b)] {
                if let EndConfig::Iface(name) = e {
                    if ifaces.contains(name) {
                        return Err(format!("links[{i}].{side}_iface: {name:?} is the end of another link too"));
                    }
                    ifaces.push(name.clone());
                }
            }
            ends.push((a, b));
        }
        let mut switch_of = |name: &str| -> usize {
            switch_names.iter().position(|s| s == name).unwrap_or_else(|| {
                switch_names.push(name.to_string());
                switch_ports.push(Vec::new());
                switch_names.len() - 1
            })
        };
        // Each end at a switch is a port of it: link i's end a carries frames out of the switch
        // by the forward direction (2i) and brings them in by the reverse one (2i + 1).
        let mut end_plans = Vec::new();
        for (i, (a, b)) in ends.iter().enumerate() {
            let mut plan_end = |e: &EndConfig, out: DirId| match e {
                EndConfig::Iface(name) => End::Iface(name.clone()),
                EndConfig::Switch(name) => {
                    let s = switch_of(name);
                    End::Port { switch: s, port: usize::MAX - out } // the port number is set below
                }
            };
            end_plans.push((plan_end(a, 2 * i), plan_end(b, 2 * i + 1)));
        }
        for (i, (a, b)) in end_plans.iter_mut().enumerate() {
            let peer_of = |e: &End| match e {
                End::Port { switch, .. } => Peer::Switch { switch: *switch, link: i },
                End::Iface(_) => Peer::External,
            };
            let (peer_of_a, peer_of_b) = (peer_of(b), peer_of(a));
            for (e, out, peer) in [(a, 2 * i, peer_of_a), (b, 2 * i + 1, peer_of_b)] {
                if let End::Port { switch, port } = e {
                    *port = switch_ports[*switch].len();
                    switch_ports[*switch].push(PortSpec { out, peer });
                }
            }
        }
        let mut dirs = Vec::new();
        for (i, (a, b)) in end_plans.into_iter().enumerate() {
            dirs.push(DirPlan { id: 2 * i, link: i, which: "forward", input: a.clone(), output: b.clone(), worker: 0 });
            dirs.push(DirPlan { id: 2 * i + 1, link: i, which: "reverse", input: b, output: a, worker: 0 });
        }
        let workers = cfg.workers.unwrap_or(cores).clamp(1, dirs.len().max(1));
        for (d, w) in assign_workers(&dirs, &switch_ports, workers).into_iter().enumerate() {
            dirs[d].worker = w;
        }
        Ok(Plan { dirs, switch_names, switch_ports, workers })
    }
}

/// Which worker serves each direction. A frame's dearest step is its way out (its copy into the
/// receiving host's stack, which runs on the sending thread), so the directions that leave the
/// datapath are dealt round-robin; every other direction goes to the worker that serves most of
/// the ways out its frames can reach, so that a frame crosses the datapath on one worker and is
/// handed on without a queue between threads (ties: the worker with fewest directions).
pub fn assign_workers(dirs: &[DirPlan], switch_ports: &[Vec<PortSpec>], workers: usize) -> Vec<usize> {
    let mut worker = vec![usize::MAX; dirs.len()];
    let mut load = vec![0usize; workers];
    let mut next = 0;
    for d in dirs.iter().filter(|d| matches!(d.output, End::Iface(_))) {
        worker[d.id] = next;
        load[next] += 1;
        next = (next + 1) % workers;
    }
    for d in dirs.iter().filter(|d| !matches!(d.output, End::Iface(_))) {
        let mut votes = vec![0usize; workers];
        let mut seen = vec![false; dirs.len()];
        let mut stack = vec![d.id];
        seen[d.id] = true;
        while let Some(id) = stack.pop() {
            match dirs[id].output {
                End::Iface(_) => votes[worker[id]] += 1,
                End::Port { switch, port } => {
                    for (p, spec) in switch_ports[switch].iter().enumerate() {
                        if p != port && !std::mem::replace(&mut seen[spec.out], true) {
                            stack.push(spec.out);
                        }
                    }
                }
            }
        }
        let w = (0..workers).max_by_key(|&w| (votes[w], usize::MAX - load[w])).unwrap_or(0);
        worker[d.id] = w;
        load[w] += 1;
    }
    worker
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(links: &str, workers: Option<usize>) -> Config {
        let dir = r#"{"queue": {"discipline": "droptail", "packets": 10}}"#;
        let links = links.replace("DIR", &format!(r#""forward": {dir}, "reverse": {dir}"#));
        let w = workers.map_or(String::new(), |n| format!(r#", "workers": {n}"#));
        serde_json::from_str(&format!(r#"{{"stats_path": "/x", "links": [{links}]{w}}}"#)).unwrap()
    }

    #[test]
    fn cs244_puts_the_data_path_on_one_worker_and_the_acks_on_the_other() {
        // h1 - s0 - h2, s0 inside the datapath.
        let cfg = config(r#"{"name": "h1-s0", "a_iface": "l0a", "b_switch": "s0", DIR},
                           {"name": "s0-h2", "a_switch": "s0", "b_iface": "l1b", DIR}"#, None);
        let plan = Plan::new(&cfg, 2).unwrap();
        assert_eq!(plan.switch_names, ["s0"]);
        // s0's port 0 is link 0's end b: out by h1-s0.reverse (1); port 1, link 1's end a: out by 2.
        assert_eq!(plan.switch_ports[0].iter().map(|p| p.out).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(plan.dirs[0].input, End::Iface("l0a".into()));
        assert_eq!(plan.dirs[0].output, End::Port { switch: 0, port: 0 });
        assert_eq!(plan.dirs[2].input, End::Port { switch: 0, port: 1 });
        assert_eq!(plan.dirs[2].output, End::Iface("l1b".into()));
        let w: Vec<usize> = plan.dirs.iter().map(|d| d.worker).collect();
        // h1 -> s0 -> h2 (0, 2) together, h2 -> s0 -> h1 (3, 1) together, on two workers.
        assert_eq!(w[0], w[2]);
        assert_eq!(w[3], w[1]);
        assert_ne!(w[0], w[1]);
    }

    #[test]
    fn a_star_spreads_its_hosts_over_the_workers_and_one_core_has_one_worker() {
        let links: Vec<String> = (0..6).map(|i| format!(r#"{{"name": "h{i}-s0", "a_iface": "h{i}", "b_switch": "s0", DIR}}"#)).collect();
        let cfg = config(&links.join(","), None);
        let plan = Plan::new(&cfg, 3).unwrap();
        let mut load = [0; 3];
        plan.dirs.iter().for_each(|d| load[d.worker] += 1);
        assert_eq!(load, [4, 4, 4]);
        assert_eq!(Plan::new(&cfg, 1).unwrap().dirs.iter().map(|d| d.worker).max(), Some(0));
        // The config's count wins; never more workers than directions.
        assert_eq!(Plan::new(&config(&links.join(","), Some(5)), 2).unwrap().workers, 5);
        assert_eq!(Plan::new(&config(&links[..1].join(","), Some(8)), 2).unwrap().workers, 2);
    }

    #[test]
    fn a_link_between_two_switches_is_a_port_of_each() {
        let cfg = config(r#"{"name": "h1-s0", "a_iface": "l0a", "b_switch": "s0", DIR},
                           {"name": "s0-s1", "a_switch": "s0", "b_switch": "s1", DIR},
                           {"name": "s1-h2", "a_switch": "s1", "b_iface": "l2b", DIR}"#, Some(2));
        let plan = Plan::new(&cfg, 2).unwrap();
        assert_eq!(plan.switch_names, ["s0", "s1"]);
        assert_eq!(plan.switch_ports[0][1].peer, Peer::Switch { switch: 1, link: 1 });
        assert_eq!(plan.switch_ports[1][0].peer, Peer::Switch { switch: 0, link: 1 });
        assert_eq!(plan.dirs[2].input, End::Port { switch: 0, port: 1 });
        assert_eq!(plan.dirs[2].output, End::Port { switch: 1, port: 0 });
        // h1 -> h2 on one worker: 0, 2, 4.
        assert!(plan.dirs[0].worker == plan.dirs[2].worker && plan.dirs[2].worker == plan.dirs[4].worker);
    }

    #[test]
    fn an_interface_may_end_one_link_only() {
        let cfg = config(r#"{"name": "a", "a_iface": "x", "b_iface": "y", DIR}, {"name": "b", "a_iface": "z", "b_iface": "x", DIR}"#, None);
        assert_eq!(Plan::new(&cfg, 2).err().unwrap(), r#"links[1].b_iface: "x" is the end of another link too"#);
    }
}
