// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * bloatlab_dctcp: DCTCP (RFC 8257) as a BPF tcp_congestion_ops, for kernels that have no
 * tcp_dctcp of their own. Beside it only build.sh, which builds it.
 *
 * Who uses it
 *   A spec that asks for cc = "dctcp" on a kernel without dctcp (src/bloatlab/testbed/congestion.py).
 *   bloatlab registers this object (`bpftool struct_ops register`) before the network is built,
 *   gives the workloads its name, bloatlab_dctcp, in place of "dctcp", and unregisters it when
 *   the last network that holds it is removed (or `bloatlab clean` finds none holding it). The
 *   name cannot collide with the kernel's own "dctcp" module.
 *
 * How it is built
 *   bpf/build.sh DIR, the one recipe: clang -target bpf against DIR/vmlinux.h, which bpftool
 *   writes from this kernel's BTF (/sys/kernel/btf/vmlinux), into DIR/bloatlab_dctcp.bpf.o.
 *   `make build` builds it into target/bpf; a wheel's build (setup.py) into the package's _bin;
 *   bloatlab.binaries finds it in either. Without BTF, clang or bpftool the build skips it and
 *   `bloatlab doctor` says why.
 *
 * What it does (RFC 8257, section 3)
 *   Sender: counts the bytes each ACK acknowledges and those acknowledged with ECE (3.3; a
 *   duplicate ACK counts one MSS, as Linux's DCTCP did when it counted bytes); once per window
 *   of data (when snd_una passes what was sent at the window's start) it updates
 *       alpha = (1 - g) * alpha + g * marked / acked,   g = 1/16,
 *   alpha held in 1/1024ths and starting at 1 (1024), as Linux's dctcp_shift_g = 4 and
 *   dctcp_alpha_on_init = 1024. An ECE makes the kernel enter CWR (at most once per window)
 *   and ask ssthresh(), which answers cwnd - cwnd * alpha / 2; the cwnd then falls to it.
 *   Growth is Reno's (the kernel's tcp_reno_cong_avoid).
 *   Loss: halving, as Reno (on entering Recovery, and on an RTO); undo restores the cwnd
 *   from before the reduction.
 *   Receiver (3.2): ECE on every ACK follows whether the last data segment was CE-marked, not
 *   RFC 3168's latch-until-CWR. When the CE state changes and an ACK is being delayed, that
 *   ACK goes out at once carrying the old state (so it acknowledges only segments of that
 *   state), and the segment that changed the state is acknowledged at once with the new one.
 *   ECN: TCP_CONG_NEEDS_ECN makes a connecting end ask for ECN with an ECT(0) SYN, which Linux
 *   accepts only where the answering end's congestion control (its listener's, or its route's)
 *   needs ECN too: bloatlab gives both hosts a route to the other with this congestion control
 *   (iperf3 sets its -C only once connected). A connection on which ECN was not negotiated all
 *   the same is handed to reno (its packets then carry no ECT). Its packets are ECT(0): Linux
 *   6.18 has no flag for a congestion control to send ECT(1).
 *   TCP_CONG_NON_RESTRICTED lets a network namespace make it its default (a host's cc).
 *
 * What it exposes
 *   The map bloatlab_dcflow (LRU hash; `bpftool map dump name bloatlab_dcflow -j`), one entry
 *   per connection end keyed by its local and remote IPv4 address and port: alpha, the
 *   acknowledged and ECE-marked bytes, windows, reductions, the cwnd at each window's end, and
 *   the receiver's CE counts. An entry outlives its socket (until the map is full, or freed
 *   with the program), so a test reads it after the flow ends.
 *
 * Differences from Linux's tcp_dctcp.c: bytes, not delivered packets, as RFC 8257 counts; no
 * PLB (protective load balancing); no get_info (a BPF congestion control cannot have one), so
 * `ss -ti` shows no dctcp: line: read the map.
 */

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* The kernel's tcp_reno_* are kfuncs a struct_ops congestion control may call. */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* #defines of include/net/tcp.h, which BTF does not carry. */
#define TCP_CONG_NON_RESTRICTED 0x1
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_MODE_RFC3168 0x1 /* TCP_ECN_OK before Linux 6.17 */
#define TCP_ECN_DEMAND_CWR 0x4
#define TCP_ECN_MODE_ACCECN 0x10
#define SOL_TCP 6
#define TCP_CONGESTION 13

#define ALPHA_ONE 1024U /* alpha = 1 */
#define SHIFT_G 4U      /* g = 1 / 2^4 */

/* GPL-compatible, as the kernel asks of a program that calls its kfuncs. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Per connection, in the socket's icsk_ca_priv (104 bytes). */
struct bloatlab_dctcp_ca {
	__u32 alpha;         /* 1/1024ths */
	__u32 next_seq;      /* the window ends when snd_una reaches it */
	__u32 prior_snd_una; /* what the last ACK left acknowledged */
	__u32 acked_bytes;   /* in this window */
	__u32 marked_bytes;  /* in this window, acknowledged with ECE */
	__u32 loss_cwnd;     /* the cwnd before the last reduction: what undo restores */
	__u32 prior_rcv_nxt; /* receiver: rcv_nxt when the CE state was last seen */
	__u32 ce_state;      /* receiver: 1 when the last data segment was CE-marked */
};

struct bloatlab_flow_key {
	__u8 local_addr[4]; /* IPv4, as on the wire (an IPv6 peer's shows as what the kernel keeps there) */
	__u8 remote_addr[4];
	__u16 local_port;
	__u16 remote_port;
};

struct bloatlab_flow_stats {
	__u32 alpha;              /* 1/1024ths, after the last window */
	__u32 cwnd;               /* segments, at the last window's end */
	__u32 ssthresh;           /* segments, at the last window's end */
	__u32 fallback;           /* 1: ECN was not negotiated, the connection runs reno */
	__u64 windows;            /* windows that ended (alpha updates) */
	__u64 marked_windows;     /* of them, with ECE-marked bytes */
	__u64 cwnd_sum;           /* the cwnd at each window's end, summed (mean = cwnd_sum / windows) */
	__u64 bytes_acked;        /* acknowledged, over the connection */
	__u64 bytes_marked;       /* acknowledged with ECE */
	__u64 reductions;         /* ssthresh() answered: ECE (once per window) or loss */
	__u64 losses;             /* halvings for loss: fast recovery or RTO */
	__u64 ce_segments;        /* receiver: CE-marked data segments */
	__u64 ce_changes;         /* receiver: CE state changes, each acknowledged at once */
	__u64 delayed_acks_flushed; /* receiver: delayed ACKs sent early with the prior CE state */
	__u64 updated_ns;         /* bpf_ktime_get_ns() */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bloatlab_flow_key);
	__type(value, struct bloatlab_flow_stats);
} bloatlab_dcflow SEC(".maps");

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct bloatlab_dctcp_ca *ca_of(struct sock *sk)
{
	return (struct bloatlab_dctcp_ca *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline void flow_key_of(struct sock *sk, struct bloatlab_flow_key *key)
{
	/* The IPv4 fields: an IPv6 socket's too when its peer is IPv4 (v4-mapped, as iperf3's). */
	__u32 local = sk->__sk_common.skc_rcv_saddr, remote = sk->__sk_common.skc_daddr;

	__builtin_memcpy(key->local_addr, &local, 4);
	__builtin_memcpy(key->remote_addr, &remote, 4);
	key->local_port = sk->__sk_common.skc_num;
	key->remote_port = bpf_ntohs(sk->__sk_common.skc_dport);
}

/* The connection's entry, made if it has none (an LRU map makes room by evicting the oldest). */
static __always_inline struct bloatlab_flow_stats *flow_of(struct sock *sk)
{
	struct bloatlab_flow_key key = {};
	struct bloatlab_flow_stats *stats;

	flow_key_of(sk, &key);
	stats = bpf_map_lookup_elem(&bloatlab_dcflow, &key);
	if (stats)
		return stats;
	struct bloatlab_flow_stats fresh = {.alpha = ALPHA_ONE};

	bpf_map_update_elem(&bloatlab_dcflow, &key, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&bloatlab_dcflow, &key);
}

static __always_inline void new_window(struct tcp_sock *tp, struct bloatlab_dctcp_ca *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->acked_bytes = 0;
	ca->marked_bytes = 0;
}

SEC("struct_ops/bloatlab_dctcp_init")
void BPF_PROG(bloatlab_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct bloatlab_dctcp_ca *ca = ca_of(sk);
	struct bloatlab_flow_key key = {};
	int state = sk->__sk_common.skc_state;

	ca->alpha = ALPHA_ONE;
	ca->prior_snd_una = tp->snd_una;
	ca->loss_cwnd = 0;
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = 0;
	new_window(tp, ca);

	/* A fresh entry: a port used again by a later connection starts from nothing. */
	struct bloatlab_flow_stats fresh = {.alpha = ALPHA_ONE, .updated_ns = bpf_ktime_get_ns()};

	if (!(tp->ecn_flags & (TCP_ECN_MODE_RFC3168 | TCP_ECN_MODE_ACCECN)) && state != TCP_LISTEN &&
	    state != TCP_CLOSE) {
		/* No ECN on this connection: DCTCP would have no signal but loss. Reno, whose switch
		 * also clears the ECT that NEEDS_ECN set on the socket for the handshake. Should the
		 * kernel refuse the switch, this stays DCTCP (initialised above) without marks. */
		char reno[] = "reno";

		fresh.fallback = 1;
		flow_key_of(sk, &key);
		bpf_map_update_elem(&bloatlab_dcflow, &key, &fresh, BPF_ANY);
		bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, reno, sizeof(reno));
		return;
	}
	flow_key_of(sk, &key);
	bpf_map_update_elem(&bloatlab_dcflow, &key, &fresh, BPF_ANY);
}

/* RFC 8257 3.3: the fraction of bytes marked in the window that ended, into alpha. */
SEC("struct_ops/bloatlab_dctcp_in_ack_event")
void BPF_PROG(bloatlab_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct bloatlab_dctcp_ca *ca = ca_of(sk);
	__u32 acked = tp->snd_una - ca->prior_snd_una;

	/* A duplicate ACK, with data outstanding, stands for a segment that arrived (one MSS); an
	 * ACK that only updates the window stands for nothing, and so does the ACK on a segment of
	 * the peer's data when none of ours is outstanding (a receiver's). */
	if (acked == 0 && !(flags & CA_ACK_WIN_UPDATE) && tp->snd_una != tp->snd_nxt)
		acked = tp->mss_cache;
	if (acked) {
		ca->prior_snd_una = tp->snd_una;
		ca->acked_bytes += acked;
		if (flags & CA_ACK_ECE)
			ca->marked_bytes += acked;
	}
	if (before(tp->snd_una, ca->next_seq))
		return;
	if (!ca->acked_bytes) {
		/* Nothing of ours was acknowledged (an idle sender): nothing to learn alpha from. */
		new_window(tp, ca);
		return;
	}

	/* alpha = (1 - g) alpha + g F, in 1/1024ths. alpha >> 4 is 0 below 16/1024: then a
	 * window without marks takes alpha to 0 (Linux's min_not_zero), or it would never get there. */
	__u32 alpha = ca->alpha;
	__u32 decay = alpha >> SHIFT_G;

	alpha -= decay ? decay : alpha;
	if (ca->marked_bytes) {
		/* g F = marked / acked / 16, in 1/1024ths: marked * 64 / acked (in 64 bits). */
		__u64 marked = ca->marked_bytes, total = ca->acked_bytes;

		alpha += (__u32)((marked << (10 - SHIFT_G)) / total);
		if (alpha > ALPHA_ONE)
			alpha = ALPHA_ONE;
	}
	ca->alpha = alpha;

	struct bloatlab_flow_stats *stats = flow_of(sk);

	if (stats) {
		stats->alpha = alpha;
		stats->cwnd = tp->snd_cwnd;
		stats->ssthresh = tp->snd_ssthresh;
		stats->windows += 1;
		stats->marked_windows += ca->marked_bytes ? 1 : 0;
		stats->cwnd_sum += tp->snd_cwnd;
		stats->bytes_acked += ca->acked_bytes;
		stats->bytes_marked += ca->marked_bytes;
		stats->updated_ns = bpf_ktime_get_ns();
	}
	new_window(tp, ca);
}

/* RFC 8257 3.3, step 11: cwnd = cwnd * (1 - alpha / 2). The kernel asks once per window of
 * ECE (entering CWR) and on loss, where set_state/cwnd_event then take it to a half. */
SEC("struct_ops/bloatlab_dctcp_ssthresh")
__u32 BPF_PROG(bloatlab_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct bloatlab_dctcp_ca *ca = ca_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 reduced = cwnd - ((cwnd * ca->alpha) >> 11); /* alpha / 2, in 1/2048ths */
	struct bloatlab_flow_stats *stats = flow_of(sk);

	if (stats)
		stats->reductions += 1;
	ca->loss_cwnd = cwnd;
	return reduced > 2 ? reduced : 2;
}

/* Loss: Reno's halving (RFC 8257 3.5), whatever alpha says. */
static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct bloatlab_dctcp_ca *ca = ca_of(sk);
	__u32 half = tp->snd_cwnd >> 1;
	struct bloatlab_flow_stats *stats = flow_of(sk);

	if (stats)
		stats->losses += 1;
	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = half > 2 ? half : 2;
}

SEC("struct_ops/bloatlab_dctcp_set_state")
void BPF_PROG(bloatlab_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	/* Entering fast recovery; an RTO comes as CA_EVENT_LOSS, so each loss halves once. */
	if (new_state == TCP_CA_Recovery &&
	    new_state != BPF_CORE_READ_BITFIELD((struct inet_connection_sock *)sk, icsk_ca_state))
		react_to_loss(sk);
}

static __always_inline void demand_cwr(struct tcp_sock *tp, __u32 ce_state)
{
	/* TCP_ECN_DEMAND_CWR is what sets ECE on the ACKs the receiver sends. */
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* RFC 8257 3.2: the receiver's two-state machine, ECE = the CE state of the last data segment. */
static __always_inline void ce_seen(struct sock *sk, __u32 ce)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct bloatlab_dctcp_ca *ca = ca_of(sk);
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct bloatlab_flow_stats *stats = flow_of(sk);

	if (ca->ce_state != ce) {
		/* A delayed ACK pending covers segments of the old state: send it now, with the old
		 * ECE and only up to where the old state ended. Then acknowledge the segment that
		 * changed the state at once. */
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			demand_cwr(tp, ca->ce_state);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
			if (stats)
				stats->delayed_acks_flushed += 1;
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
		if (stats)
			stats->ce_changes += 1;
	}
	if (ce && stats)
		stats->ce_segments += 1;
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = ce;
	demand_cwr(tp, ce);
}

SEC("struct_ops/bloatlab_dctcp_cwnd_event")
void BPF_PROG(bloatlab_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		ce_seen(sk, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		ce_seen(sk, 0);
		break;
	case CA_EVENT_LOSS:
		react_to_loss(sk);
		break;
	default:
		break;
	}
}

/* A reduction that proves spurious (the kernel's undo) restores the cwnd from before it. */
SEC("struct_ops/bloatlab_dctcp_undo_cwnd")
__u32 BPF_PROG(bloatlab_dctcp_undo_cwnd, struct sock *sk)
{
	__u32 cwnd = tcp_of(sk)->snd_cwnd, before_loss = ca_of(sk)->loss_cwnd;

	return cwnd > before_loss ? cwnd : before_loss;
}

SEC("struct_ops/bloatlab_dctcp_cong_avoid")
void BPF_PROG(bloatlab_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC(".struct_ops")
struct tcp_congestion_ops bloatlab_dctcp = {
	.init = (void *)bloatlab_dctcp_init,
	.in_ack_event = (void *)bloatlab_dctcp_in_ack_event,
	.cwnd_event = (void *)bloatlab_dctcp_cwnd_event,
	.ssthresh = (void *)bloatlab_dctcp_ssthresh,
	.cong_avoid = (void *)bloatlab_dctcp_cong_avoid,
	.undo_cwnd = (void *)bloatlab_dctcp_undo_cwnd,
	.set_state = (void *)bloatlab_dctcp_set_state,
	.flags = TCP_CONG_NEEDS_ECN | TCP_CONG_NON_RESTRICTED,
	.name = "bloatlab_dctcp",
};
