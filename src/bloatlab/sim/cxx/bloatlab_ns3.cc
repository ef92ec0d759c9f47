// bloatlab-ns3: one resolved bloatlab experiment, simulated in ns-3 (docs/simulation.md).
//
// Reads the scenario bloatlab writes (src/bloatlab/sim/scenario.py: one statement per line),
// builds it with ns-3's own models (point-to-point devices, traffic-control queue discs, its TCP;
// a channel with a delay each way and DualPI2 are the driver's), runs it, and writes what the
// emulated run's probes record, in files bloatlab reads back (src/bloatlab/sim/outputs.py):
// pings, throughput per 100 ms, cwnd, fetches, flows, dualpi2's figures, and a queue log per
// probed direction in bloatlab-link's own format.
//
// Switches are routers here: each link is its own subnet, and global routing finds the paths.
// A link's rate is scaled by (1500 + 2) / (1500 + 14), so that a full-sized packet, which ns-3
// sends with a 2-byte PPP header and the emulator with a 14-byte Ethernet one, takes the same
// time on the wire.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-apps-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

[[noreturn]] void
Fail(const std::string& msg)
{
    std::cerr << "bloatlab-ns3: error: " << msg << std::endl;
    std::exit(2);
}

// A trace source of `o`, which must exist: a renamed one in a later ns-3 fails loudly.
void
Connect(Ptr<Object> o, const std::string& trace, const CallbackBase& cb)
{
    if (!o->TraceConnectWithoutContext(trace, cb))
    {
        Fail(o->GetInstanceTypeId().GetName() + " has no trace source " + trace);
    }
}

// One statement of the scenario: a verb, positional words, and key=value options.
struct Statement
{
    std::string verb;
    std::vector<std::string> words;
    std::map<std::string, std::string> opts;

    const std::string& Opt(const std::string& key) const
    {
        auto it = opts.find(key);
        if (it == opts.end())
        {
            Fail(verb + ": missing " + key);
        }
        return it->second;
    }

    bool Has(const std::string& key) const
    {
        return opts.count(key) > 0;
    }

    uint64_t U64(const std::string& key) const
    {
        return std::stoull(Opt(key));
    }

    double F64(const std::string& key) const
    {
        return std::stod(Opt(key));
    }
};

// One direction's options of a `link` statement: those prefixed f. (forward) or r. (reverse).
Statement
DirectionOf(const Statement& link, const std::string& prefix)
{
    Statement d;
    d.verb = "direction";
    for (auto& [k, v] : link.opts)
    {
        if (k.rfind(prefix, 0) == 0)
        {
            d.opts[k.substr(prefix.size())] = v;
        }
    }
    return d;
}

std::vector<Statement>
ReadScenario(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
    {
        Fail("cannot read " + path);
    }
    std::vector<Statement> out;
    std::string line;
    while (std::getline(in, line))
    {
        if (line.empty() || line[0] == '#')
        {
            continue;
        }
        std::istringstream words(line);
        Statement s;
        words >> s.verb;
        std::string w;
        while (words >> w)
        {
            auto eq = w.find('=');
            if (eq == std::string::npos)
            {
                s.words.push_back(w);
            }
            else
            {
                s.opts[w.substr(0, eq)] = w.substr(eq + 1);
            }
        }
        out.push_back(s);
    }
    return out;
}

// DualPI2 --------------------------------------------------------------------------------------
//
// DualPI2 (RFC 9332, the DualQ Coupled AQM), which ns-3 lacks, as Linux's sch_dualpi2 runs it
// and as bloatlab's core does (datapath/core/src/qdisc/dualpi2.rs): the two are kept alike, so
// that a simulated run and an emulated one differ by the network, not by the discipline.
//
// Two FIFOs behind one limit: the L queue takes the packets whose ECN bits meet the mask (ECT(1)
// and CE with l4s_ect, any ECT with any_ect), the C queue the rest. One PI controller updates
// the base probability p' every tupdate from the larger of the two heads' sojourn times. A C
// packet is dropped, or marked if ECN-capable, with p'^2 (two draws against p'); an L packet is
// marked with k p', and by the L queue's own step AQM when it waited longer than step_thresh.
// Overload is k p' above 1: with drop_on_overload both queues then drop with p'^2 (the L queue
// marks the rest), without it p' stops at 1/k and every L packet is marked. Nothing is dropped or marked while less than
// two MTUs stay queued. The verdict falls at dequeue (drop_early: at enqueue). A weighted round
// robin of bytes (classic_protection) lets the L queue go first without starving the C queue.
//
// The updates run as the core runs them: due ones catch up, each at its own time, when the
// next packet arrives or leaves (the queues do not change in between, so each sees what a
// timer would), the first tupdate after the first packet. Lengths count frames: each item's
// size plus FrameOverhead (the driver's links add the 14 bytes of an Ethernet header, so that
// two MTUs, the scheduler's credit and the byte limits mean what they mean to the core).

// bloatlab's reason names (datapath/core/src/reason.rs), which DropCode and MarkCode know.
const char* const REASON_QUEUE_FULL = "queue_full";
const char* const REASON_DUALPI2_CLASSIC = "dualpi2_classic"; // a drop, or a mark, in the C queue
const char* const REASON_DUALPI2_OVERLOAD = "dualpi2_overload";
const char* const REASON_DUALPI2_COUPLED = "dualpi2_coupled";
const char* const REASON_DUALPI2_STEP = "dualpi2_step";

// One PI2 update (RFC 9332, A.1): p' moves by alpha (Hz) times the queueing delay's distance
// from target plus beta (Hz) times its change since the last update, delays in seconds, and
// stays within [0, 1]; without drop_on_overload it stops at 1/k, where k p' reaches 1. The
// arithmetic is the core's (update_probability), so both give the same p' from the same delays.
double
Pi2Update(double prob,
          uint64_t qdelay_ns,
          uint64_t last_qdelay_ns,
          uint64_t target_ns,
          double alpha_hz,
          double beta_hz,
          bool drop_on_overload,
          uint32_t coupling)
{
    auto secs = [](uint64_t ns) { return double(ns) * 1e-9; };
    double delta = alpha_hz * (secs(qdelay_ns) - secs(target_ns)) +
                   beta_hz * (secs(qdelay_ns) - secs(last_qdelay_ns));
    double next = std::clamp(prob + delta, 0.0, 1.0);
    return drop_on_overload ? next : std::min(next, 1.0 / coupling);
}

class DualPi2QueueDisc : public QueueDisc
{
  public:
    // Which ECN bits send a packet to the L queue (Linux ANDs the packet's two bits with it).
    enum EcnMask
    {
        L4S_ECT = 1, // ECT(1) and CE: the L4S identifier (RFC 9331)
        ANY_ECT = 3, // ECT(0) too
    };

    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("bloatlab::DualPi2QueueDisc")
                .SetParent<QueueDisc>()
                .SetGroupName("TrafficControl")
                .AddConstructor<DualPi2QueueDisc>()
                .AddAttribute("MaxSize",
                              "The limit of both queues together, in packets or bytes (frames)",
                              QueueSizeValue(QueueSize("10000p")),
                              MakeQueueSizeAccessor(&QueueDisc::SetMaxSize, &QueueDisc::GetMaxSize),
                              MakeQueueSizeChecker())
                .AddAttribute("Target",
                              "The queueing delay the PI controller steers to",
                              TimeValue(MilliSeconds(15)),
                              MakeTimeAccessor(&DualPi2QueueDisc::m_target),
                              MakeTimeChecker())
                .AddAttribute("Tupdate",
                              "How often p' is updated",
                              TimeValue(MilliSeconds(16)),
                              MakeTimeAccessor(&DualPi2QueueDisc::m_tupdate),
                              MakeTimeChecker())
                .AddAttribute("Alpha",
                              "Integral gain in Hz (RFC 9332's 0.16; Linux's 41/256)",
                              DoubleValue(41.0 / 256),
                              MakeDoubleAccessor(&DualPi2QueueDisc::m_alpha_hz),
                              MakeDoubleChecker<double>(0))
                .AddAttribute("Beta",
                              "Proportional gain in Hz (RFC 9332's 3.2; Linux's 819/256)",
                              DoubleValue(819.0 / 256),
                              MakeDoubleAccessor(&DualPi2QueueDisc::m_beta_hz),
                              MakeDoubleChecker<double>(0))
                .AddAttribute("StepThreshold",
                              "The L queue's step AQM marks a packet that waited longer than this",
                              TimeValue(MilliSeconds(1)),
                              MakeTimeAccessor(&DualPi2QueueDisc::m_step_thresh),
                              MakeTimeChecker())
                .AddAttribute("StepPackets",
                              "The step threshold as packets left behind in the L queue instead "
                              "(0: the threshold is StepThreshold, a time)",
                              UintegerValue(0),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_step_packets),
                              MakeUintegerChecker<uint32_t>())
                .AddAttribute("MinQlenStep",
                              "Step-mark only packets that found at least this many in the L queue",
                              UintegerValue(0),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_min_qlen_step),
                              MakeUintegerChecker<uint32_t>())
                .AddAttribute("CouplingFactor",
                              "k: the L queue marks with k p', the C queue with p'^2",
                              UintegerValue(2),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_coupling),
                              MakeUintegerChecker<uint32_t>(1, 255))
                .AddAttribute("ClassicProtection",
                              "The C queue's weight in the scheduler, in percent",
                              UintegerValue(10),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_wc),
                              MakeUintegerChecker<uint32_t>(0, 100))
                .AddAttribute("EcnMask",
                              "Which packets go to the L queue",
                              EnumValue(L4S_ECT),
                              MakeEnumAccessor<EcnMask>(&DualPi2QueueDisc::m_ecn_mask),
                              MakeEnumChecker(L4S_ECT, "l4s_ect", ANY_ECT, "any_ect"))
                .AddAttribute("DropOnOverload",
                              "Past k p' = 1, drop with p'^2 in both queues (else hold p' at 1/k)",
                              BooleanValue(true),
                              MakeBooleanAccessor(&DualPi2QueueDisc::m_drop_on_overload),
                              MakeBooleanChecker())
                .AddAttribute("DropEarly",
                              "Decide drops and coupled marks at enqueue rather than dequeue",
                              BooleanValue(false),
                              MakeBooleanAccessor(&DualPi2QueueDisc::m_drop_early),
                              MakeBooleanChecker())
                .AddAttribute("MemoryLimit",
                              "Bytes both queues may hold (0: MaxSize x 2 x Mtu, or a byte MaxSize)",
                              UintegerValue(0),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_memory_limit_bytes),
                              MakeUintegerChecker<uint64_t>())
                .AddAttribute("Mtu",
                              "One full frame in bytes: nothing is dropped or marked below two queued",
                              UintegerValue(1514),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_mtu_bytes),
                              MakeUintegerChecker<uint32_t>(1))
                .AddAttribute("FrameOverhead",
                              "Bytes the link adds to each item, counted in its length",
                              UintegerValue(0),
                              MakeUintegerAccessor(&DualPi2QueueDisc::m_frame_overhead_bytes),
                              MakeUintegerChecker<uint32_t>())
                .AddTraceSource("Probability",
                                "p' at a time: its 0 when the controller starts, then each update's, "
                                "at the update's own time (the queue log's probability records)",
                                MakeTraceSourceAccessor(&DualPi2QueueDisc::m_probability),
                                "bloatlab::DualPi2QueueDisc::ProbabilityCallback");
        return tid;
    }

    DualPi2QueueDisc()
        : QueueDisc(QueueDiscSizePolicy::MULTIPLE_QUEUES, QueueSizeUnit::PACKETS),
          m_uv(CreateObject<UniformRandomVariable>())
    {
    }

    int64_t AssignStreams(int64_t stream)
    {
        m_uv->SetStream(stream);
        return 1;
    }

    // What `tc -s qdisc` shows of it, in the names of bloatlab's record of it (DualPi2Stats in
    // src/bloatlab/testbed/datapath_stats.py), as a CSV header and row.
    static std::string StatsHeader()
    {
        return "prob,delay_c_us,delay_l_us,pkts_in_c,pkts_in_l,maxq,ecn_mark,step_mark,credit,"
               "memory_used_bytes,max_memory_used_bytes,memory_limit_bytes";
    }

    std::string StatsRow() const
    {
        Time now = Simulator::Now();
        std::ostringstream row;
        row.precision(9);
        row << m_prob << "," << HeadDelayNs(C, now) / 1000 << "," << HeadDelayNs(L, now) / 1000 << ","
            << m_pkts_in_c << "," << m_pkts_in_l << "," << m_maxq << "," << m_ecn_marks << "," << m_step_marks
            << "," << m_credit_bytes << "," << m_backlog_bytes << "," << m_max_backlog_bytes << ","
            << m_memory_limit_resolved_bytes;
        return row.str();
    }

  private:
    enum Which : std::size_t
    {
        L = 0, // the internal queues' indices
        C = 1,
    };

    uint64_t FrameBytes(Ptr<const QueueDiscItem> item) const
    {
        return item->GetSize() + m_frame_overhead_bytes;
    }

    // How long the head of queue `q` has waited at `t` (zero when it is empty).
    uint64_t HeadDelayNs(Which q, Time t) const
    {
        Ptr<const QueueDiscItem> head = GetInternalQueue(q)->Peek();
        return head ? (t - head->GetTimeStamp()).GetNanoSeconds() : 0;
    }

    // Runs every update due by `now`, each on the head delays at its own time.
    void CatchUp(Time now)
    {
        if (!m_started)
        {
            m_started = true;
            m_next_update = now + m_tupdate;
            m_probability(now, m_prob);
        }
        while (m_next_update <= now)
        {
            if (GetNPackets() == 0 && m_prob == 0 && m_last_qdelay_ns == 0)
            {
                // Idle with nothing to forget: every update until now leaves p' at 0.
                int64_t missed = (now - m_next_update).GetNanoSeconds() / m_tupdate.GetNanoSeconds();
                m_next_update += m_tupdate * (missed + 1);
                break;
            }
            uint64_t qdelay_ns = std::max(HeadDelayNs(C, m_next_update), HeadDelayNs(L, m_next_update));
            m_prob = Pi2Update(m_prob, qdelay_ns, m_last_qdelay_ns, m_target.GetNanoSeconds(), m_alpha_hz,
                               m_beta_hz, m_drop_on_overload, m_coupling);
            m_probability(m_next_update, m_prob);
            m_last_qdelay_ns = qdelay_ns;
            m_next_update += m_tupdate;
        }
    }

    bool Chance(double p)
    {
        return p > 0 && m_uv->GetValue() < p;
    }

    bool MarkCe(Ptr<QueueDiscItem> item, const char* reason)
    {
        bool marked = Mark(item, reason);
        m_ecn_marks += marked;
        return marked;
    }

    // The coupled AQM's verdict on `item` (Linux's must_drop), with m_backlog_bytes queued
    // besides it: a drop reason, or nullptr to let it through, marked if the draw says so.
    const char* MustDrop(Ptr<QueueDiscItem> item, bool in_l)
    {
        if (m_backlog_bytes < 2 * uint64_t(m_mtu_bytes))
        {
            return nullptr;
        }
        double prob = m_prob;
        double l_prob = prob * m_coupling;
        bool overload = l_prob > 1.0;
        auto squared = [&]() { return Chance(prob) && Chance(prob); }; // p'^2, as Linux rolls it
        if (!in_l)
        {
            // Hit by both draws: dropped, or marked if ECN-capable and not overloaded.
            bool hit = squared() && (overload || !MarkCe(item, REASON_DUALPI2_CLASSIC));
            return hit ? REASON_DUALPI2_CLASSIC : nullptr;
        }
        if (overload)
        {
            if (m_drop_on_overload && squared())
            {
                return REASON_DUALPI2_OVERLOAD;
            }
            MarkCe(item, REASON_DUALPI2_COUPLED); // k p' is saturated: every survivor is marked
            return nullptr;
        }
        // An L packet is ECN-capable by its classification, so the mark takes; Linux drops one
        // that is not (a tc filter's) as a classic one.
        return Chance(l_prob) && !MarkCe(item, REASON_DUALPI2_COUPLED) ? REASON_DUALPI2_CLASSIC : nullptr;
    }

    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        CatchUp(Simulator::Now());
        uint64_t len = FrameBytes(item);
        QueueSize max = GetMaxSize();
        bool within = max.GetUnit() == QueueSizeUnit::PACKETS ? GetNPackets() < max.GetValue()
                                                              : m_backlog_bytes + len <= max.GetValue();
        if (!within || m_backlog_bytes + len > m_memory_limit_resolved_bytes)
        {
            DropBeforeEnqueue(item, REASON_QUEUE_FULL);
            return false;
        }
        uint8_t tos = 0;
        item->GetUint8Value(QueueItem::IP_DSFIELD, tos);
        bool in_l = (tos & m_ecn_mask) != 0;
        if (m_drop_early)
        {
            if (const char* reason = MustDrop(item, in_l))
            {
                DropBeforeEnqueue(item, reason);
                return false;
            }
        }
        m_maxq = std::max<uint64_t>(m_maxq, GetNPackets());
        if (in_l)
        {
            m_apply_step.push_back(GetInternalQueue(L)->GetNPackets() >= m_min_qlen_step);
        }
        (in_l ? m_pkts_in_l : m_pkts_in_c)++;
        m_backlog_bytes += len;
        m_max_backlog_bytes = std::max(m_max_backlog_bytes, m_backlog_bytes);
        return GetInternalQueue(in_l ? L : C)->Enqueue(item);
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        Time now = Simulator::Now();
        CatchUp(now);
        Ptr<InternalQueue> l = GetInternalQueue(L), c = GetInternalQueue(C);
        while (true)
        {
            uint32_t l_len = l->GetNPackets(), c_len = c->GetNPackets();
            Ptr<QueueDiscItem> item;
            bool in_l = l_len > 0 && (c_len == 0 || m_credit_bytes <= 0);
            bool step = false;
            int64_t weight = 0; // the credit a departure earns, per byte, while the other queue waits
            if (in_l)
            {
                item = l->Dequeue();
                step = m_apply_step.front();
                m_apply_step.pop_front();
                weight = c_len ? m_wc : 0;
            }
            else if (c_len > 0)
            {
                item = c->Dequeue();
                weight = l_len ? -int64_t(100 - m_wc) : 0;
            }
            else
            {
                m_credit_bytes = m_credit_init_bytes;
                return nullptr;
            }
            uint64_t len = FrameBytes(item);
            m_backlog_bytes -= len;
            if (!m_drop_early)
            {
                if (const char* reason = MustDrop(item, in_l))
                {
                    DropAfterDequeue(item, reason);
                    continue;
                }
            }
            if (in_l && step)
            {
                // The step AQM: how long this packet waited, or how many it leaves behind.
                bool over = m_step_packets ? l->GetNPackets() > m_step_packets
                                           : now - item->GetTimeStamp() > m_step_thresh;
                if (over && MarkCe(item, REASON_DUALPI2_STEP))
                {
                    m_step_marks++;
                }
            }
            m_credit_bytes += weight * int64_t(len);
            return item;
        }
    }

    bool CheckConfig() override
    {
        if (GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0)
        {
            NS_LOG_UNCOND("DualPi2QueueDisc takes no classes and no packet filters");
            return false;
        }
        if (GetNInternalQueues() == 0)
        {
            // Unbounded: the limits are the disc's own, over both queues.
            for (int i = 0; i < 2; i++)
            {
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize",
                    QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, UINT32_MAX))));
            }
        }
        if (GetNInternalQueues() != 2 || m_target.IsZero() || !m_tupdate.IsStrictlyPositive())
        {
            NS_LOG_UNCOND("DualPi2QueueDisc needs two internal queues, a target and a tupdate");
            return false;
        }
        return true;
    }

    void InitializeParams() override
    {
        QueueSize max = GetMaxSize();
        m_memory_limit_resolved_bytes =
            m_memory_limit_bytes ? m_memory_limit_bytes
            : max.GetUnit() == QueueSizeUnit::PACKETS ? uint64_t(max.GetValue()) * 2 * m_mtu_bytes
                                                      : max.GetValue();
        // Starts with the queue of the larger weight: the L queue by default.
        m_credit_init_bytes = int64_t(m_mtu_bytes) * (int64_t(m_wc) - int64_t(100 - m_wc));
        m_credit_bytes = m_credit_init_bytes;
    }

    // Parameters
    Time m_target, m_tupdate, m_step_thresh;
    double m_alpha_hz = 0, m_beta_hz = 0;
    uint32_t m_step_packets = 0, m_min_qlen_step = 0, m_coupling = 2, m_wc = 10;
    EcnMask m_ecn_mask = L4S_ECT;
    bool m_drop_on_overload = true, m_drop_early = false;
    uint64_t m_memory_limit_bytes = 0;
    uint32_t m_mtu_bytes = 1514, m_frame_overhead_bytes = 0;

    // State
    Ptr<UniformRandomVariable> m_uv;
    uint64_t m_memory_limit_resolved_bytes = 0;
    uint64_t m_backlog_bytes = 0;   // frames of both queues
    std::deque<bool> m_apply_step;  // per L packet: min_qlen_step met when it arrived
    double m_prob = 0;              // p'
    uint64_t m_last_qdelay_ns = 0;  // the delay the last update saw
    bool m_started = false;
    Time m_next_update;
    int64_t m_credit_bytes = 0;     // at or below 0 the L queue goes next, above it the C queue
    int64_t m_credit_init_bytes = 0;
    // Counters, as tc -s shows them
    uint64_t m_pkts_in_c = 0, m_pkts_in_l = 0, m_maxq = 0, m_ecn_marks = 0, m_step_marks = 0;
    uint64_t m_max_backlog_bytes = 0;
    TracedCallback<Time, double> m_probability; // p' as set, and when
};

NS_OBJECT_ENSURE_REGISTERED(DualPi2QueueDisc);

// The queue log's record (docs/datapath.md): 32 bytes, little-endian.
enum Kind : uint8_t
{
    ENQUEUE = 1,
    DEQUEUE = 2,
    DROP = 3,
    MARK = 4,
    PROBABILITY = 5, // value: p x 2^32, rounded
};

// bloatlab's drop and mark reason codes (datapath/core/src/reason.rs) for ns-3's reasons, and
// for those a disc of the driver's own gives under bloatlab's names.
uint8_t
DropCode(const std::string& disc, const std::string& reason)
{
    static const std::map<std::string, uint8_t> own = {
        {REASON_QUEUE_FULL, 2},
        {REASON_DUALPI2_CLASSIC, 15},
        {REASON_DUALPI2_OVERLOAD, 16},
    };
    if (auto it = own.find(reason); it != own.end())
    {
        return it->second;
    }
    if (reason == "Queue disc limit exceeded" || reason == "Overlimit drop")
    {
        return disc == "fq_codel" ? 10 : 2; // fq_overflow, queue_full
    }
    if (reason == "Target exceeded drop")
    {
        return 8; // codel
    }
    if (disc == "red")
    {
        return reason == "Unforced drop" ? 6 : 7; // red_early, red_forced
    }
    if (disc == "pie")
    {
        return reason == "Unforced drop" ? 9 : 2; // pie_early, queue_full
    }
    return 2;
}

uint8_t
MarkCode(const std::string& disc, const std::string& reason)
{
    static const std::map<std::string, uint8_t> own = {
        {REASON_DUALPI2_CLASSIC, 6},
        {REASON_DUALPI2_COUPLED, 7},
        {REASON_DUALPI2_STEP, 8},
    };
    if (auto it = own.find(reason); it != own.end())
    {
        return it->second;
    }
    if (disc == "red")
    {
        return reason == "Unforced mark" ? 1 : 2;
    }
    return disc == "pie" ? 4 : 3;
}

class QueueLog
{
  public:
    QueueLog(const std::string& path, Ptr<QueueDisc> q, std::string disc)
        : m_q(q),
          m_disc(std::move(disc))
    {
        m_f = std::fopen(path.c_str(), "wb");
        if (!m_f)
        {
            Fail("cannot write " + path);
        }
    }

    ~QueueLog()
    {
        std::fclose(m_f);
    }

    // A record at `at` (by default now), with the queue's backlog as it is now.
    void Write(Kind kind, uint8_t reason, uint64_t value, Time at = Simulator::Now())
    {
        uint8_t rec[32] = {};
        uint64_t t = at.GetNanoSeconds();
        uint32_t bytes = m_q->GetNBytes();
        uint32_t pkts = m_q->GetNPackets();
        std::memcpy(rec, &t, 8);
        std::memcpy(rec + 8, &value, 8);
        std::memcpy(rec + 16, &bytes, 4);
        std::memcpy(rec + 20, &pkts, 4);
        rec[24] = kind;
        rec[25] = reason;
        std::fwrite(rec, 1, 32, m_f);
    }

    void Attach()
    {
        Connect(m_q, "Enqueue", MakeCallback(&QueueLog::OnEnqueue, this));
        Connect(m_q, "Dequeue", MakeCallback(&QueueLog::OnDequeue, this));
        Connect(m_q, "DropBeforeEnqueue", MakeCallback(&QueueLog::OnDrop, this));
        Connect(m_q, "DropAfterDequeue", MakeCallback(&QueueLog::OnDrop, this));
        Connect(m_q, "Mark", MakeCallback(&QueueLog::OnMark, this));
        // ns-3's PIE keeps its drop probability to itself (no trace source, no getter): only the
        // driver's DualPI2 tells its p'.
        if (m_disc == "dualpi2")
        {
            Connect(m_q, "Probability", MakeCallback(&QueueLog::OnProbability, this));
        }
    }

  private:
    void OnEnqueue(Ptr<const QueueDiscItem> item)
    {
        Write(ENQUEUE, 0, item->GetSize());
    }

    void OnDequeue(Ptr<const QueueDiscItem> item)
    {
        Write(DEQUEUE, 0, (Simulator::Now() - item->GetTimeStamp()).GetNanoSeconds());
    }

    void OnDrop(Ptr<const QueueDiscItem> item, const char* reason)
    {
        Write(DROP, DropCode(m_disc, reason), item->GetSize());
    }

    void OnMark(Ptr<const QueueDiscItem> item, const char* reason)
    {
        Write(MARK, MarkCode(m_disc, reason), item->GetSize());
    }

    // Written as the core writes it: only when the logged value changes, so an idle queue at 0
    // writes nothing update after update. The updates run at the next enqueue or dequeue, before
    // it changes the queue: its backlog now is the one at the update's time.
    void OnProbability(Time at, double p)
    {
        uint64_t value = std::llround(std::clamp(p, 0.0, 1.0) * 4294967296.0);
        if (m_last_prob != value)
        {
            m_last_prob = value;
            Write(PROBABILITY, 0, value, at);
        }
    }

    Ptr<QueueDisc> m_q;
    std::string m_disc;
    std::FILE* m_f;
    std::optional<uint64_t> m_last_prob;
};

ObjectFactory
CongestionControl(const std::string& cc)
{
    ObjectFactory f;
    if (cc == "reno")
    {
        // Not TcpLinuxReno: in ns-3 3.44 a flow of it that met a retransmission timeout beside a
        // ping and web fetches (cs244) kept its window at one segment for the rest of the run.
        // NewReno is the same AIMD with the recovery Linux's reno also uses.
        f.SetTypeId(TcpNewReno::GetTypeId());
    }
    else if (cc == "cubic")
    {
        f.SetTypeId(TcpCubic::GetTypeId());
    }
    else if (cc == "bbr")
    {
        f.SetTypeId(TcpBbr::GetTypeId());
    }
    else if (cc == "dctcp")
    {
        // ECT(1), the L4S identifier, so that DualPI2 (l4s_ect) puts it in the L queue. Its
        // Init turns ECN on (DctcpEcn mode: every packet ECT, CE echoed per segment).
        f.SetTypeId(TcpDctcp::GetTypeId());
        f.Set("UseEct0", BooleanValue(false));
    }
    else
    {
        Fail("no congestion control " + cc + " in ns-3 here");
    }
    return f;
}

// A TCP socket with its own congestion control (ns-3 otherwise sets one per node).
Ptr<Socket>
TcpSocketWith(Ptr<Node> node, const std::string& cc)
{
    Ptr<Socket> s = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
    auto tcp = DynamicCast<TcpSocketBase>(s);
    tcp->SetCongestionControlAlgorithm(CongestionControl(cc).Create<TcpCongestionOps>());
    if (cc == "dctcp")
    {
        tcp->SetUseEcn(TcpSocketState::On); // as TcpDctcp::Init sets it: both ends must ask
    }
    return s;
}

// Whether a flow's receiver needs the flow's congestion control too: ns-3 echoes CE per segment,
// as DCTCP's receiver must (RFC 8257, 3.2), only from a socket that runs TcpDctcp (Linux's DCTCP
// likewise lives at both ends). The others receive with ns-3's default.
bool
ReceiverRuns(const std::string& cc)
{
    return cc == "dctcp";
}

const uint32_t SEGMENT = 1448; // the MSS with timestamps on a 1500-byte MTU, as Linux sends it

// Output files, written as the simulation goes.
struct Outputs
{
    std::ofstream ping, throughput, cwnd, fetch;

    explicit Outputs(const std::string& dir)
        : ping(dir + "/ping.csv"),
          throughput(dir + "/throughput.csv"),
          cwnd(dir + "/cwnd.csv"),
          fetch(dir + "/fetch.csv")
    {
        if (!ping || !throughput || !cwnd || !fetch)
        {
            Fail("cannot write to " + dir);
        }
        ping.precision(9);
        throughput.precision(9);
        cwnd.precision(9);
        fetch.precision(9);
    }
};

// Seconds since the simulation's start: the run's t0.
double
T()
{
    return Simulator::Now().GetSeconds();
}

// Follows one sending socket's cwnd, ssthresh and smoothed RTT into cwnd.csv under `flow`.
class CwndTrace : public SimpleRefCount<CwndTrace>
{
  public:
    CwndTrace(std::string flow, Ptr<Socket> s, Outputs* out)
        : m_flow(std::move(flow)),
          m_out(out)
    {
        Connect(s, "CongestionWindow", MakeCallback(&CwndTrace::OnCwnd, this));
        Connect(s, "SlowStartThreshold", MakeCallback(&CwndTrace::OnSsthresh, this));
        Connect(s, "RTT", MakeCallback(&CwndTrace::OnSrtt, this));
    }

  private:
    void OnCwnd(uint32_t, uint32_t now)
    {
        m_cwnd = now;
        m_out->cwnd << T() << "," << m_flow << "," << double(m_cwnd) / SEGMENT << ",";
        if (m_ssthresh < 0x7fffffff)
        {
            m_out->cwnd << double(m_ssthresh) / SEGMENT;
        }
        m_out->cwnd << "," << m_srtt_ms << "\n";
    }

    void OnSsthresh(uint32_t, uint32_t now)
    {
        m_ssthresh = now;
    }

    void OnSrtt(Time, Time now)
    {
        m_srtt_ms = now.GetSeconds() * 1e3;
    }

    std::string m_flow;
    Outputs* m_out;
    uint32_t m_cwnd = 0, m_ssthresh = 0x7fffffff;
    double m_srtt_ms = 0;
};

// A bulk TCP sender: keeps its socket's buffer full from start to stop, and follows its cwnd.
class BulkSender : public Application
{
  public:
    BulkSender(std::string name, std::string cc, Address peer, Outputs* out)
        : m_name(std::move(name)),
          m_cc(std::move(cc)),
          m_peer(peer),
          m_out(out)
    {
    }

    uint64_t retransmits = 0;
    uint64_t sent = 0;

  private:
    void StartApplication() override
    {
        m_socket = TcpSocketWith(GetNode(), m_cc);
        m_socket->Bind();
        m_socket->Connect(m_peer);
        m_socket->SetSendCallback(MakeCallback(&BulkSender::Fill, this));
        m_socket->SetConnectCallback(MakeCallback(&BulkSender::Connected, this),
                                     MakeNullCallback<void, Ptr<Socket>>());
        m_trace = Create<CwndTrace>(m_name, m_socket, m_out);
        Connect(m_socket, "Retransmission", MakeCallback(&BulkSender::OnRetransmit, this));
    }

    void StopApplication() override
    {
        if (m_socket)
        {
            m_socket->Close();
        }
    }

    void Connected(Ptr<Socket> s)
    {
        Fill(s, s->GetTxAvailable());
    }

    void Fill(Ptr<Socket> s, uint32_t)
    {
        static const std::vector<uint8_t> zeros(65536, 0);
        while (s->GetTxAvailable() > 0)
        {
            uint32_t n = std::min<uint32_t>(s->GetTxAvailable(), zeros.size());
            int sent = s->Send(zeros.data(), n, 0);
            if (sent <= 0)
            {
                break;
            }
            this->sent += sent;
        }
    }

    void OnRetransmit(Ptr<const Packet>,
                      const TcpHeader&,
                      const Address&,
                      const Address&,
                      Ptr<const TcpSocketBase>)
    {
        retransmits++;
    }

    std::string m_name, m_cc;
    Address m_peer;
    Outputs* m_out;
    Ptr<Socket> m_socket;
    Ptr<CwndTrace> m_trace;
};

// The bulk flow's receiver: counts what the application reads, per 100 ms as iperf3 reports it.
class BulkReceiver : public Application
{
  public:
    BulkReceiver(std::string name, uint16_t port, std::string cc, Outputs* out)
        : m_name(std::move(name)),
          m_port(port),
          m_cc(std::move(cc)),
          m_out(out)
    {
    }

    uint64_t received = 0;
    double first = -1, last = -1;

  private:
    void StartApplication() override
    {
        m_listen = ReceiverRuns(m_cc) ? TcpSocketWith(GetNode(), m_cc)
                                      : Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        m_listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_port));
        m_listen->Listen();
        m_listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&BulkReceiver::Accepted, this));
    }

    void StopApplication() override
    {
        Report();
        m_listen->Close();
    }

    void Accepted(Ptr<Socket> s, const Address&)
    {
        s->SetRecvCallback(MakeCallback(&BulkReceiver::Read, this));
        first = T();
        m_interval_start = first;
        m_tick = Simulator::Schedule(Seconds(0.1), &BulkReceiver::Tick, this);
    }

    void Read(Ptr<Socket> s)
    {
        while (Ptr<Packet> p = s->Recv())
        {
            received += p->GetSize();
            m_interval += p->GetSize();
            last = T();
        }
    }

    void Tick()
    {
        Report();
        m_tick = Simulator::Schedule(Seconds(0.1), &BulkReceiver::Tick, this);
    }

    void Report()
    {
        double t = T();
        if (m_interval_start < 0 || t <= m_interval_start)
        {
            return;
        }
        m_out->throughput << t << "," << m_name << ","
                          << m_interval * 8 / (t - m_interval_start) / 1e6 << "\n";
        m_interval = 0;
        m_interval_start = t;
    }

    std::string m_name;
    uint16_t m_port;
    std::string m_cc;
    Outputs* m_out;
    Ptr<Socket> m_listen;
    uint64_t m_interval = 0;
    double m_interval_start = -1;
    EventId m_tick;
};

// A web server: each connection sends a request; the reply is `size` bytes, then it closes.
class WebServer : public Application
{
  public:
    WebServer(std::string name, uint16_t port, uint32_t size, std::string cc, Outputs* out)
        : m_name(std::move(name)),
          m_port(port),
          m_size(size),
          m_cc(std::move(cc)),
          m_out(out)
    {
    }

  private:
    void StartApplication() override
    {
        m_listen = TcpSocketWith(GetNode(), m_cc);
        m_listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_port));
        m_listen->Listen();
        m_listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&WebServer::Accepted, this));
    }

    void StopApplication() override
    {
        m_listen->Close();
    }

    void Accepted(Ptr<Socket> s, const Address&)
    {
        // Each fetch's connection is a flow of its own, WEB#N from 1, as the emulated run names it.
        m_traces.push_back(Create<CwndTrace>(m_name + "#" + std::to_string(m_traces.size() + 1), s, m_out));
        m_left[PeekPointer(s)] = m_size;
        s->SetRecvCallback(MakeCallback(&WebServer::Request, this));
        s->SetSendCallback(MakeCallback(&WebServer::Send, this));
    }

    void Request(Ptr<Socket> s)
    {
        while (s->Recv())
        {
        }
        Send(s, s->GetTxAvailable());
    }

    void Send(Ptr<Socket> s, uint32_t)
    {
        static const std::vector<uint8_t> zeros(65536, 0);
        uint32_t& left = m_left[PeekPointer(s)];
        while (left > 0 && s->GetTxAvailable() > 0)
        {
            uint32_t n = std::min<uint32_t>({left, s->GetTxAvailable(), uint32_t(zeros.size())});
            int sent = s->Send(zeros.data(), n, 0);
            if (sent <= 0)
            {
                return;
            }
            left -= sent;
        }
        if (left == 0)
        {
            s->Close();
        }
    }

    std::string m_name;
    uint16_t m_port;
    uint32_t m_size;
    std::string m_cc;
    Outputs* m_out;
    Ptr<Socket> m_listen;
    std::map<Socket*, uint32_t> m_left;
    std::vector<Ptr<CwndTrace>> m_traces;
};

// A web client, as bloatlab's emulated one runs curl: every `every`, `count` fetches one after
// another; a period already past when a burst ends is skipped. Each fetch's time runs from its
// connect to the reply's last byte, as curl's time_total does; one not done within `timeout`
// failed, and one the end of the run cuts short is no result.
class WebClient : public Application
{
  public:
    WebClient(std::string name, Address server, uint32_t size, Time every, uint32_t count, Time timeout,
              Time stop, std::string cc, Outputs* out)
        : m_name(std::move(name)),
          m_server(server),
          m_size(size),
          m_every(every),
          m_count(count),
          m_timeout(timeout),
          m_stop(stop),
          m_cc(std::move(cc)),
          m_out(out)
    {
    }

  private:
    void StartApplication() override
    {
        m_first = Simulator::Now();
        Burst();
    }

    void StopApplication() override
    {
        Abandon();
    }

    void Burst()
    {
        m_left = m_count;
        Next();
    }

    void Next()
    {
        if (Simulator::Now() >= m_stop)
        {
            return;
        }
        if (m_left == 0)
        {
            // The next period that has not begun yet.
            uint64_t done = (Simulator::Now() - m_first).GetNanoSeconds() / m_every.GetNanoSeconds();
            m_k = std::max(m_k + 1, done + 1);
            Simulator::Schedule(m_first + m_every * m_k - Simulator::Now(), &WebClient::Burst, this);
            return;
        }
        m_left--;
        m_socket = TcpSocketWith(GetNode(), m_cc);
        m_socket->Bind();
        m_start = T();
        m_got = 0;
        m_socket->SetConnectCallback(MakeCallback(&WebClient::Connected, this),
                                     MakeCallback(&WebClient::Refused, this));
        m_socket->SetRecvCallback(MakeCallback(&WebClient::Read, this));
        m_socket->Connect(m_server);
        m_deadline = Simulator::Schedule(m_timeout, &WebClient::TimedOut, this);
    }

    void Connected(Ptr<Socket> s)
    {
        static const std::vector<uint8_t> request(80, 'x'); // about curl's GET
        s->Send(request.data(), request.size(), 0);
    }

    void Refused(Ptr<Socket>)
    {
        Done(false);
    }

    void Read(Ptr<Socket> s)
    {
        while (Ptr<Packet> p = s->Recv())
        {
            m_got += p->GetSize();
        }
        if (m_got >= m_size)
        {
            Done(true);
        }
    }

    void TimedOut()
    {
        Done(false);
    }

    void Done(bool ok)
    {
        m_deadline.Cancel();
        m_out->fetch << m_start << "," << T() - m_start << "," << m_name << "," << (ok ? 1 : 0) << "\n";
        m_socket->SetRecvCallback(MakeNullCallback<void, Ptr<Socket>>());
        m_socket->Close();
        m_socket = nullptr;
        Next();
    }

    void Abandon()
    {
        if (m_socket)
        {
            m_deadline.Cancel();
            m_socket->Close();
            m_socket = nullptr;
        }
    }

    std::string m_name;
    Address m_server;
    uint32_t m_size;
    Time m_every;
    uint32_t m_count;
    Time m_timeout, m_stop;
    std::string m_cc;
    Outputs* m_out;
    Time m_first;
    uint64_t m_k = 0;
    uint32_t m_left = 0;
    Ptr<Socket> m_socket;
    double m_start = 0;
    uint32_t m_got = 0;
    EventId m_deadline;
};

struct Direction
{
    std::string name; // "s0->h2"
    Ptr<NetDevice> device; // where it leaves
    Ptr<QueueDisc> queue;
    std::string disc;
    uint64_t departures = 0, bytes_out = 0;
};

void
CountDeparture(Direction* d, Ptr<const Packet> p)
{
    d->departures++;
    d->bytes_out += p->GetSize() - 2 + 14; // as Ethernet frames: PPP's header out, Ethernet's in
}

// The queue disc type of a discipline; its attributes are set once it exists (SetAttributes).
std::string
QueueDiscType(const std::string& disc)
{
    static const std::map<std::string, std::string> types = {
        {"droptail", "ns3::FifoQueueDisc"},
        {"codel", "ns3::CoDelQueueDisc"},
        {"fq_codel", "ns3::FqCoDelQueueDisc"},
        {"red", "ns3::RedQueueDisc"},
        {"pie", "ns3::PieQueueDisc"},
        {"dualpi2", "bloatlab::DualPi2QueueDisc"}, // the driver's own (above)
    };
    auto it = types.find(disc);
    if (it == types.end())
    {
        Fail("no ns-3 queue disc for " + disc);
    }
    return it->second;
}

// The spec's parameters, which src/bloatlab/sim/scenario.py has mapped to ns-3's attributes
// (q.NAME=VALUE); set before the simulation starts, when the queue disc checks them.
void
SetAttributes(Ptr<QueueDisc> q, const Statement& s)
{
    for (auto& [key, value] : s.opts)
    {
        if (key.rfind("q.", 0) == 0 && !q->SetAttributeFailSafe(key.substr(2), StringValue(value)))
        {
            Fail(q->GetInstanceTypeId().GetName() + ": cannot set " + key.substr(2) + " to " + value);
        }
    }
}

// A point-to-point channel with a delay each way. ns-3's has one for both, where a spec's link
// directions each have their own (the l4s preset puts a flow's whole base RTT on the way out).
// What the first device attached sends (the link's first end: its forward direction) takes
// ForwardDelay, the other's ReverseDelay; a packet arrives whole txTime + that delay after its
// first bit left, as on ns-3's channel.
class AsymmetricChannel : public PointToPointChannel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("bloatlab::AsymmetricChannel")
                                .SetParent<PointToPointChannel>()
                                .SetGroupName("PointToPoint")
                                .AddConstructor<AsymmetricChannel>()
                                .AddAttribute("ForwardDelay",
                                              "Propagation delay from the first device attached to the second",
                                              TimeValue(Seconds(0)),
                                              MakeTimeAccessor(&AsymmetricChannel::m_forward),
                                              MakeTimeChecker())
                                .AddAttribute("ReverseDelay",
                                              "Propagation delay from the second device attached to the first",
                                              TimeValue(Seconds(0)),
                                              MakeTimeAccessor(&AsymmetricChannel::m_reverse),
                                              MakeTimeChecker());
        return tid;
    }

    bool TransmitStart(Ptr<const Packet> p, Ptr<PointToPointNetDevice> src, Time txTime) override
    {
        bool forward = src == GetSource(0);
        Ptr<PointToPointNetDevice> dst = GetDestination(forward ? 0 : 1);
        Simulator::ScheduleWithContext(dst->GetNode()->GetId(),
                                       txTime + (forward ? m_forward : m_reverse),
                                       &PointToPointNetDevice::Receive,
                                       dst,
                                       p->Copy());
        return true;
    }

  private:
    Time m_forward, m_reverse;
};

NS_OBJECT_ENSURE_REGISTERED(AsymmetricChannel);

// A link's two devices, on `a` and `b`, and the channel between them: what PointToPointHelper's
// Install builds, which takes no channel type. Each device holds one packet below its queue disc
// (it needs a queue), and traffic control's flow control follows that queue (the aggregated
// NetDeviceQueueInterface), so the disc keeps the rest and hands the device one when it frees.
NetDeviceContainer
InstallLink(Ptr<Node> a, Ptr<Node> b, Time forward, Time reverse)
{
    NetDeviceContainer devs;
    for (Ptr<Node> node : {a, b})
    {
        auto dev = CreateObject<PointToPointNetDevice>();
        dev->SetAddress(Mac48Address::Allocate());
        node->AddDevice(dev);
        auto queue = CreateObjectWithAttributes<DropTailQueue<Packet>>("MaxSize", QueueSizeValue(QueueSize("1p")));
        dev->SetQueue(queue);
        auto ndqi = CreateObject<NetDeviceQueueInterface>();
        ndqi->GetTxQueue(0)->ConnectQueueTraces(queue);
        dev->AggregateObject(ndqi);
        devs.Add(dev);
    }
    auto channel = CreateObjectWithAttributes<AsymmetricChannel>("ForwardDelay", TimeValue(forward),
                                                                 "ReverseDelay", TimeValue(reverse));
    for (int i = 0; i < 2; i++)
    {
        DynamicCast<PointToPointNetDevice>(devs.Get(i))->Attach(channel); // the first: forward's sender
    }
    return devs;
}

// Replay mode ---------------------------------------------------------------------------------
//
// `replay arrivals=CSV rate_bps=N discipline=D q.NAME=VALUE...`: an arrival trace (bloatlab
// replay's format: t_ns,size_bytes,flow,ecn) through one ns-3 queue disc in front of a link of
// that rate, with no network around it, to hold bloatlab's disciplines against ns-3's own
// (docs/simulation.md). Writes replay.csv: each packet's fate as bloatlab replay counts them, and
// each CE mark (a packet may be marked twice: DualPI2's coupled and step marks).

// A packet of the trace as the queue disc sees it: `size` bytes, ECN-capable or not.
class TraceItem : public QueueDiscItem
{
  public:
    TraceItem(Ptr<Packet> p, uint64_t id, uint8_t ecn)
        : QueueDiscItem(p, Mac48Address(), 0),
          id(id),
          ecn(ecn)
    {
    }

    void AddHeader() override
    {
    }

    bool Mark() override
    {
        if (ecn == 0)
        {
            return false; // not ECN-capable: the disc drops instead
        }
        ecn = 3;
        return true;
    }

    // Its ECN bits as the DS field's low two, which DualPI2 classifies on.
    bool GetUint8Value(Uint8Values field, uint8_t& value) const override
    {
        value = ecn;
        return field == IP_DSFIELD;
    }

    uint64_t id;
    uint8_t ecn; // 0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE
};

struct Arrival
{
    uint64_t t_ns;
    uint32_t size;
    uint8_t ecn;
};

std::vector<Arrival>
ReadArrivals(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
    {
        Fail("cannot read " + path);
    }
    std::string line;
    std::getline(in, line);
    std::vector<std::string> names;
    {
        std::istringstream h(line);
        std::string f;
        while (std::getline(h, f, ','))
        {
            names.push_back(f);
        }
    }
    auto col = [&](const std::string& n) {
        auto it = std::find(names.begin(), names.end(), n);
        if (it == names.end())
        {
            Fail(path + ": no column " + n);
        }
        return size_t(it - names.begin());
    };
    size_t ct = col("t_ns"), cs = col("size_bytes"), ce = col("ecn");
    std::vector<Arrival> out;
    while (std::getline(in, line))
    {
        if (line.empty())
        {
            continue;
        }
        std::vector<std::string> f;
        std::istringstream row(line);
        std::string x;
        while (std::getline(row, x, ','))
        {
            f.push_back(x);
        }
        out.push_back({std::stoull(f.at(ct)), uint32_t(std::stoul(f.at(cs))), uint8_t(std::stoul(f.at(ce)))});
    }
    return out;
}

class Replay
{
  public:
    Replay(const Statement& s, const std::string& out_dir)
        : m_arrivals(ReadArrivals(s.Opt("arrivals"))),
          m_bps(s.U64("rate_bps")),
          m_disc(s.Opt("discipline")),
          m_out(out_dir + "/replay.csv")
    {
        ObjectFactory f;
        f.SetTypeId(QueueDiscType(m_disc));
        m_q = f.Create<QueueDisc>();
        SetAttributes(m_q, s);
        m_q->SetSendCallback([](Ptr<QueueDiscItem>) {}); // never asked: the replay dequeues itself
        m_q->Initialize();
        Connect(m_q, "DropBeforeEnqueue", MakeCallback(&Replay::OnDrop, this));
        Connect(m_q, "DropAfterDequeue", MakeCallback(&Replay::OnDrop, this));
        Connect(m_q, "Mark", MakeCallback(&Replay::OnMark, this));
        m_out << "id,t_ns,fate,reason\n";
    }

    void Run()
    {
        if (!m_arrivals.empty())
        {
            Simulator::Schedule(NanoSeconds(m_arrivals[0].t_ns), &Replay::Arrive, this);
        }
        // The disciplines' own timers (PIE's update) never stop: the replay ends when the link
        // has sent what it was given.
        Simulator::Run();
    }

  private:
    // The next arrival is scheduled only now, so that a departure due at the same nanosecond,
    // scheduled earlier, comes first, as bloatlab's core orders them.
    void Arrive()
    {
        const Arrival& a = m_arrivals[m_next];
        Ptr<Packet> p = Create<Packet>(a.size);
        m_q->Enqueue(Create<TraceItem>(p, m_next, a.ecn));
        m_next++;
        if (m_next < m_arrivals.size())
        {
            Simulator::Schedule(NanoSeconds(m_arrivals[m_next].t_ns) - Simulator::Now(), &Replay::Arrive, this);
        }
        if (!m_busy)
        {
            Serve();
        }
    }

    // The link takes the next packet; it leaves once its last bit is on the wire.
    void Serve()
    {
        Ptr<QueueDiscItem> item = m_q->Dequeue();
        m_busy = bool(item);
        if (!item)
        {
            if (m_next == m_arrivals.size())
            {
                Simulator::Stop(); // nothing left to arrive or to send
            }
            return;
        }
        auto* t = dynamic_cast<TraceItem*>(PeekPointer(item));
        m_out << t->id << "," << Simulator::Now().GetNanoSeconds() << ",sent," << (t->ecn == 3 ? "ce" : "")
              << "\n";
        uint64_t ns = (uint64_t(item->GetSize()) * 8 * 1000000000ull + m_bps - 1) / m_bps;
        Simulator::Schedule(NanoSeconds(ns), &Replay::Serve, this);
    }

    void OnDrop(Ptr<const QueueDiscItem> item, const char* reason)
    {
        auto* t = dynamic_cast<const TraceItem*>(PeekPointer(item));
        m_out << t->id << "," << Simulator::Now().GetNanoSeconds() << ",dropped," << int(DropCode(m_disc, reason))
              << "\n";
    }

    void OnMark(Ptr<const QueueDiscItem> item, const char* reason)
    {
        auto* t = dynamic_cast<const TraceItem*>(PeekPointer(item));
        m_out << t->id << "," << Simulator::Now().GetNanoSeconds() << ",marked," << int(MarkCode(m_disc, reason))
              << "\n";
    }

    std::vector<Arrival> m_arrivals;
    size_t m_next = 0;
    uint64_t m_bps;
    std::string m_disc;
    std::ofstream m_out;
    Ptr<QueueDisc> m_q;
    bool m_busy = false;
};

} // namespace

int
main(int argc, char* argv[])
{
    if (argc != 3)
    {
        std::cerr << "usage: bloatlab-ns3 SCENARIO OUT_DIR" << std::endl;
        return 2;
    }
    std::vector<Statement> scenario = ReadScenario(argv[1]);
    // Linux's TCP as bloatlab's hosts run it: 1448-byte segments (timestamps on), a 200 ms
    // minimum RTO, and buffers as large as its autotuning grows them (tcp_rmem, tcp_wmem).
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(SEGMENT));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(6291456));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(4194304));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    std::string out_dir = argv[2];
    for (const Statement& s : scenario)
    {
        if (s.verb == "replay")
        {
            Replay(s, out_dir).Run();
            Simulator::Destroy();
            return 0;
        }
    }
    Outputs out(out_dir);

    Time duration;
    std::map<std::string, Ptr<Node>> nodes;
    std::map<std::string, Ipv4Address> address; // each host's, on its first link
    std::vector<std::unique_ptr<Direction>> directions;
    std::vector<std::unique_ptr<QueueLog>> logs;
    InternetStackHelper internet;
    uint32_t subnet = 0;

    // Nodes and links first: the workloads need the addresses.
    for (const Statement& s : scenario)
    {
        if (s.verb == "run")
        {
            duration = NanoSeconds(s.U64("duration_ns"));
            RngSeedManager::SetSeed(std::max<uint64_t>(1, s.U64("seed") % 0xffffffff));
            RngSeedManager::SetRun(s.U64("run"));
        }
        else if (s.verb == "node")
        {
            Ptr<Node> n = CreateObject<Node>();
            internet.Install(n);
            nodes[s.words.at(0)] = n;
        }
        else if (s.verb == "link")
        {
            // link NAME A B, then the two directions' options prefixed f. (A to B) and r.
            Statement ab = DirectionOf(s, "f."), ba = DirectionOf(s, "r.");
            NetDeviceContainer devs = InstallLink(nodes.at(s.words.at(1)), nodes.at(s.words.at(2)),
                                                  NanoSeconds(ab.U64("delay_ns")), NanoSeconds(ba.U64("delay_ns")));
            for (int i = 0; i < 2; i++)
            {
                const Statement& d = i == 0 ? ab : ba;
                Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(devs.Get(i));
                uint64_t rate = d.U64("rate_bps");
                dev->SetDataRate(DataRate(rate ? uint64_t(rate * 1502.0 / 1514.0) : 100'000'000'000ull));
                if (d.F64("loss") > 0) // lost on arrival at the far end
                {
                    Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
                    em->SetAttribute("ErrorRate", DoubleValue(d.F64("loss")));
                    em->SetAttribute("ErrorUnit", StringValue("ERROR_UNIT_PACKET"));
                    DynamicCast<PointToPointNetDevice>(devs.Get(1 - i))->SetReceiveErrorModel(em);
                }
                auto dir = std::make_unique<Direction>();
                dir->name = d.Opt("name");
                dir->device = dev;
                dir->disc = d.Opt("discipline");
                Connect(dev, "PhyTxEnd", MakeBoundCallback(&CountDeparture, dir.get()));
                TrafficControlHelper tch;
                tch.SetRootQueueDisc(QueueDiscType(dir->disc));
                dir->queue = tch.Install(dev).Get(0);
                SetAttributes(dir->queue, d);
                if (dir->disc == "dualpi2")
                {
                    // Its lengths count frames: the IP packet and an Ethernet header, as the core's.
                    dir->queue->SetAttribute("FrameOverhead", UintegerValue(14));
                }
                if (d.Has("qlog"))
                {
                    logs.push_back(std::make_unique<QueueLog>(d.Opt("qlog"), dir->queue, dir->disc));
                    logs.back()->Attach();
                }
                directions.push_back(std::move(dir));
            }
            Ipv4AddressHelper ip;
            std::ostringstream base;
            base << "10." << (1 + subnet / 256) << "." << (subnet % 256) << ".0";
            subnet++;
            ip.SetBase(base.str().c_str(), "255.255.255.0");
            Ipv4InterfaceContainer ifs = ip.Assign(devs);
            for (int i = 0; i < 2; i++)
            {
                const std::string& node = s.words.at(1 + i);
                if (!address.count(node))
                {
                    address[node] = ifs.GetAddress(i);
                }
            }
        }
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    std::vector<std::pair<std::string, Ptr<BulkSender>>> senders;
    std::vector<std::pair<std::string, Ptr<BulkReceiver>>> receivers;
    std::map<std::string, std::pair<uint64_t, uint64_t>> pings; // sent, answered
    std::vector<Ptr<Ping>> pingers;
    for (const Statement& s : scenario)
    {
        if (s.verb == "bulk")
        {
            // bulk NAME SRC DST start_ns= stop_ns= cc= port=
            const std::string& name = s.words.at(0);
            uint16_t port = s.U64("port");
            auto rx = CreateObject<BulkReceiver>(name, port, s.Opt("cc"), &out);
            nodes.at(s.words.at(2))->AddApplication(rx);
            rx->SetStartTime(Seconds(0));
            rx->SetStopTime(NanoSeconds(s.U64("stop_ns")));
            auto tx = CreateObject<BulkSender>(name, s.Opt("cc"),
                                               InetSocketAddress(address.at(s.words.at(2)), port), &out);
            nodes.at(s.words.at(1))->AddApplication(tx);
            tx->SetStartTime(NanoSeconds(s.U64("start_ns")));
            tx->SetStopTime(NanoSeconds(s.U64("stop_ns")));
            senders.emplace_back(name, tx);
            receivers.emplace_back(name, rx);
        }
        else if (s.verb == "ping")
        {
            const std::string name = s.words.at(0);
            Ptr<Ping> ping = CreateObject<Ping>();
            ping->SetAttribute("Destination", AddressValue(address.at(s.words.at(2))));
            ping->SetAttribute("Interval", TimeValue(NanoSeconds(s.U64("interval_ns"))));
            ping->SetAttribute("Size", UintegerValue(56));
            ping->SetAttribute("Tos", UintegerValue(s.U64("tos"))); // DSCP and ECN, as ping -Q sets them
            ping->SetAttribute("VerboseMode", EnumValue(Ping::VerboseMode::SILENT));
            ping->SetAttribute("Timeout", TimeValue(Seconds(10)));
            nodes.at(s.words.at(1))->AddApplication(ping);
            ping->SetStartTime(NanoSeconds(s.U64("start_ns")));
            ping->SetStopTime(NanoSeconds(s.U64("stop_ns")));
            pings[name] = {0, 0};
            auto* counts = &pings[name];
            auto* file = &out.ping;
            // A reply's time is when it came, as ping -D stamps it.
            ping->TraceConnectWithoutContext(
                "Rtt",
                Callback<void, uint16_t, Time>([counts, file, name](uint16_t, Time rtt) {
                    counts->second++;
                    *file << T() << "," << name << "," << rtt.GetSeconds() * 1e3 << "\n";
                }));
            ping->TraceConnectWithoutContext(
                "Tx",
                Callback<void, uint16_t, Ptr<Packet>>([counts](uint16_t, Ptr<Packet>) { counts->first++; }));
            pingers.push_back(ping);
        }
        else if (s.verb == "web")
        {
            // web NAME SERVER CLIENT start_ns= every_ns= count= size= cc= port=
            uint16_t port = s.U64("port");
            auto server = CreateObject<WebServer>(s.words.at(0), port, s.U64("size"), s.Opt("cc"), &out);
            nodes.at(s.words.at(1))->AddApplication(server);
            server->SetStartTime(Seconds(0));
            server->SetStopTime(duration);
            auto client = CreateObject<WebClient>(s.words.at(0),
                                                  InetSocketAddress(address.at(s.words.at(1)), port),
                                                  s.U64("size"), NanoSeconds(s.U64("every_ns")),
                                                  s.U64("count"), NanoSeconds(s.U64("timeout_ns")),
                                                  NanoSeconds(s.U64("stop_ns")), s.Opt("cc"), &out);
            nodes.at(s.words.at(2))->AddApplication(client);
            client->SetStartTime(NanoSeconds(s.U64("start_ns")));
            client->SetStopTime(NanoSeconds(s.U64("stop_ns")));
        }
        else if (s.verb != "run" && s.verb != "node" && s.verb != "link")
        {
            Fail("unknown statement " + s.verb);
        }
    }

    Simulator::Stop(duration + NanoSeconds(1));
    Simulator::Run();

    std::ofstream flows(out_dir + "/flows.csv");
    flows << "name,bytes_received,first_s,last_s,bytes_sent,retransmits\n";
    for (size_t i = 0; i < senders.size(); i++)
    {
        auto& rx = receivers[i].second;
        auto& tx = senders[i].second;
        flows << senders[i].first << "," << rx->received << "," << rx->first << "," << rx->last << ","
              << tx->sent << "," << tx->retransmits << "\n";
    }
    std::ofstream pings_out(out_dir + "/pings.csv");
    pings_out << "name,sent,received\n";
    for (auto& [name, c] : pings)
    {
        pings_out << name << "," << c.first << "," << c.second << "\n";
    }
    std::ofstream links(out_dir + "/directions.csv");
    links << "direction,departures,bytes_out,queue_drops,queue_packets\n";
    for (auto& d : directions)
    {
        QueueDisc::Stats st = d->queue->GetStats();
        links << d->name << "," << d->departures << "," << d->bytes_out << ","
              << st.nTotalDroppedPackets << "," << d->queue->GetNPackets() << "\n";
    }
    std::ofstream dualpi2(out_dir + "/dualpi2.csv");
    dualpi2 << "direction," << DualPi2QueueDisc::StatsHeader() << "\n";
    for (auto& d : directions)
    {
        if (auto q = DynamicCast<DualPi2QueueDisc>(d->queue))
        {
            dualpi2 << d->name << "," << q->StatsRow() << "\n";
        }
    }
    logs.clear();
    Simulator::Destroy();
    return 0;
}
