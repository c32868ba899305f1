// The link probe: timed messages over an emulated cluster's links (probe.h).
#include "harp/testbed/probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "harp/common/format.h"
#include "harp/common/table.h"

namespace harp::testbed {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point origin, Clock::time_point t) {
  return std::chrono::duration<double>(t - origin).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string errno_text() { return std::strerror(errno); }

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Runs fn on a new thread that has entered the network namespace `netns` (setns changes
// the calling thread's namespace only, so this process's other threads stay where they
// are); sockets made there stay in that namespace wherever they are used later.
Status in_netns(const std::string& netns, const std::function<Status()>& fn) {
  Status result;
  std::thread t([&] {
    Fd ns(::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC));
    if (ns.get() < 0) {
      result = io_error("cannot open the namespace " + netns + " (/run/netns/" + netns + "): " + errno_text() +
                        "; is the testbed up? (harp testbed up --cluster FILE)");
      return;
    }
    if (::setns(ns.get(), CLONE_NEWNET) != 0) {
      result = io_error("cannot enter the namespace " + netns + ": " + errno_text());
      return;
    }
    result = fn();
  });
  t.join();
  return result;
}

sockaddr_in address(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

Status set_options(int fd, std::chrono::milliseconds timeout) {
  const int one = 1;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
    return io_error("setsockopt: " + errno_text());
  return Status();
}

// One TCP connection between hosts a and b (a connects from its address to b's).
struct Pair {
  Fd a, b;
};

StatusOr<Pair> connect_pair(const Host& a, const Host& b, std::chrono::milliseconds timeout) {
  Fd listener;
  int port = 0;
  HARP_RETURN_IF_ERROR(in_netns(b.netns, [&]() -> Status {
    listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in at = address(b.address, 0);
    socklen_t len = sizeof at;
    if (listener.get() < 0 || ::bind(listener.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
        ::listen(listener.get(), 1) != 0 || ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&at), &len) != 0)
      return io_error("cannot listen on " + b.address + " in " + b.netns + ": " + errno_text());
    port = ntohs(at.sin_port);
    return Status();
  }));
  Pair p;
  HARP_RETURN_IF_ERROR(in_netns(a.netns, [&]() -> Status {
    p.a = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in from = address(a.address, 0), to = address(b.address, port);
    if (p.a.get() < 0 || ::bind(p.a.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
        ::connect(p.a.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0)
      return io_error("cannot connect from " + a.address + " (" + a.netns + ") to " + b.address + ":" +
                      std::to_string(port) + ": " + errno_text());
    return Status();
  }));
  p.b = Fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (p.b.get() < 0) return io_error("accept in " + b.netns + ": " + errno_text());
  HARP_RETURN_IF_ERROR(set_options(p.a.get(), timeout));
  HARP_RETURN_IF_ERROR(set_options(p.b.get(), timeout));
  return p;
}

bool send_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, data, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// One direction of one cell: a sender thread and a receiver thread on the two ends.
struct Direction {
  int out_fd = -1, in_fd = -1;
  std::vector<Clock::time_point> sent, arrived;
  std::atomic<bool> ok{true};
};

// Sends `count` messages of `bytes` on each direction at once; spaced: message i is
// sent at start + i × gap, else back to back.
void run_directions(std::vector<Direction*> dirs, std::int64_t bytes, int count, bool spaced,
                    std::chrono::duration<double> gap) {
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  std::vector<std::thread> threads;
  for (Direction* d : dirs) {
    d->sent.assign(count, {});
    d->arrived.assign(count, {});
    threads.emplace_back([d, bytes, count, spaced, gap, start] {
      const std::string buf(static_cast<std::size_t>(bytes), 'h');
      for (int i = 0; i < count && d->ok; ++i) {
        if (spaced || i == 0)
          std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(gap * i));
        d->sent[i] = Clock::now();
        if (!send_all(d->out_fd, buf.data(), buf.size())) d->ok = false;
      }
    });
    threads.emplace_back([d, bytes, count] {
      std::string buf(static_cast<std::size_t>(bytes), '\0');
      for (int i = 0; i < count && d->ok; ++i) {
        if (!recv_all(d->in_fd, buf.data(), buf.size())) d->ok = false;
        d->arrived[i] = Clock::now();
      }
    });
  }
  for (auto& t : threads) t.join();
}

double measured_of(const Direction& d, bool spaced) {
  std::vector<double> v;
  const Clock::time_point origin = d.sent.front();
  for (std::size_t i = 0; i < d.sent.size(); ++i) {
    if (spaced)
      v.push_back(seconds_since(d.sent[i], d.arrived[i]));
    else if (i > 0)
      v.push_back(seconds_since(origin, d.arrived[i]) - seconds_since(origin, d.arrived[i - 1]));
  }
  return median(v);
}

std::string size_text(std::int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kOneWaySpaced: return "one-way spaced";
    case Pattern::kOneWayBurst: return "one-way back-to-back";
    case Pattern::kBothSpaced: return "both ways spaced";
    case Pattern::kBothBurst: return "both ways back-to-back";
  }
  return "?";
}

const std::vector<Pattern>& all_patterns() {
  static const std::vector<Pattern> all = {Pattern::kOneWaySpaced, Pattern::kOneWayBurst, Pattern::kBothSpaced,
                                           Pattern::kBothBurst};
  return all;
}

StatusOr<std::vector<ProbeRow>> probe_links(const Topology& topology, const ProbeOptions& options,
                                            const std::function<void(const std::string&)>& progress) {
  if (options.repeats < 2) return invalid_argument("probe: repeats must be at least 2");
  std::vector<int> wires = options.wires;
  if (wires.empty())
    for (int w = 0; w < static_cast<int>(topology.wires.size()); ++w) wires.push_back(w);
  std::vector<ProbeRow> rows;
  for (int w : wires) {
    if (w < 0 || w >= static_cast<int>(topology.wires.size()))
      return invalid_argument("probe: no link " + std::to_string(w) + " in this testbed");
    const Wire& wire = topology.wires[w];
    const Host& a = topology.hosts[wire.a];
    const Host& b = topology.hosts[wire.b];
    HARP_ASSIGN_OR_RETURN(Pair pair, connect_pair(a, b, options.timeout));
    Direction ab, ba;
    ab.out_fd = ba.in_fd = pair.a.get();
    ba.out_fd = ab.in_fd = pair.b.get();
    run_directions({&ab, &ba}, 1024, 2, false, {});  // a first exchange, untimed
    for (std::int64_t bytes : options.sizes) {
      if (options.stop && options.stop()) return failed_precondition("probe: interrupted");
      const double model = wire.link.transfer_s(static_cast<double>(bytes));
      if (model > options.max_message_s) continue;
      std::ostringstream line;
      line << "link " << wire.a << " <-> " << wire.b << "  " << size_text(bytes) << ":";
      for (Pattern p : options.patterns) {
        const bool spaced = p == Pattern::kOneWaySpaced || p == Pattern::kBothSpaced;
        const bool both = p == Pattern::kBothSpaced || p == Pattern::kBothBurst;
        // Spaced: the link drains between messages; burst: one more message than timed gaps.
        const auto gap = std::chrono::duration<double>(2 * model + 0.01);
        const int count = spaced ? options.repeats : options.repeats + 1;
        std::vector<Direction*> dirs = {&ab};
        if (both) dirs.push_back(&ba);
        run_directions(dirs, bytes, count, spaced, gap);
        for (Direction* d : dirs) {
          if (!d->ok)
            return io_error(std::string("probe: a ") + size_text(bytes) + " message (" + pattern_name(p) +
                            ") between " + a.netns + " and " + b.netns + " did not arrive within " +
                            std::to_string(options.timeout.count()) + " ms");
          ProbeRow r;
          r.wire = w;
          r.from = d == &ab ? wire.a : wire.b;
          r.to = d == &ab ? wire.b : wire.a;
          r.pattern = p;
          r.bytes = bytes;
          r.model_s = model;
          r.measured_s = measured_of(*d, spaced);
          r.samples = spaced ? count : count - 1;
          line << "  " << pattern_name(p) << (both ? (d == &ab ? " ->" : " <-") : "") << " "
               << (r.error() >= 0 ? "+" : "") << std::round(r.error() * 1000) / 10 << "%";
          rows.push_back(r);
        }
      }
      if (progress) progress(line.str());
    }
  }
  return rows;
}

std::string probe_csv(const Topology& topology, const std::vector<ProbeRow>& rows) {
  std::ostringstream o;
  o << "link,from,to,bandwidth_gbps,latency_ms,pattern,bytes,model_ms,measured_ms,error,samples\n";
  for (const ProbeRow& r : rows) {
    const Wire& w = topology.wires[r.wire];
    o << w.a << "-" << w.b << "," << r.from << "," << r.to << "," << w.link.bandwidth_gbps << ","
      << w.link.latency_s * 1e3 << "," << pattern_name(r.pattern) << "," << r.bytes << "," << r.model_s * 1e3
      << "," << r.measured_s * 1e3 << "," << r.error() << "," << r.samples << "\n";
  }
  return o.str();
}

std::string probe_svg(const Topology& topology, const std::vector<ProbeRow>& rows) {
  // One panel per wire: x = log2(bytes), y = measured / model in [0.5, 1.5].
  std::vector<int> wires;
  for (const ProbeRow& r : rows)
    if (std::find(wires.begin(), wires.end(), r.wire) == wires.end()) wires.push_back(r.wire);
  const double W = 720, H = 220, left = 60, right = 190, top = 34, bottom = 36;
  double lo = 1e300, hi = -1e300;
  for (const ProbeRow& r : rows) {
    lo = std::min(lo, std::log2(static_cast<double>(r.bytes)));
    hi = std::max(hi, std::log2(static_cast<double>(r.bytes)));
  }
  if (hi <= lo) hi = lo + 1;
  const double y_lo = 0.5, y_hi = 1.5;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H * wires.size() + 10
    << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
  const char* colours[] = {"#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b"};
  for (std::size_t k = 0; k < wires.size(); ++k) {
    const Wire& w = topology.wires[wires[k]];
    const double y0 = k * H;
    const double pw = W - left - right, ph = H - top - bottom;
    auto X = [&](double bytes) { return left + (std::log2(bytes) - lo) / (hi - lo) * pw; };
    auto Y = [&](double ratio) {
      return y0 + top + (1 - (std::clamp(ratio, y_lo, y_hi) - y_lo) / (y_hi - y_lo)) * ph;
    };
    o << "<text x='" << left << "' y='" << y0 + 18 << "' font-size='13'>link " << w.a << " &lt;-&gt; " << w.b
      << ": " << w.link.bandwidth_gbps << " Gbit/s, " << w.link.latency_s * 1e3
      << " ms (measured / model: latency + bytes / bandwidth)</text>\n";
    o << "<rect x='" << left << "' y='" << Y(1.1) << "' width='" << pw << "' height='" << Y(0.9) - Y(1.1)
      << "' fill='#e8f4e8'/>\n";
    for (double g : {0.5, 0.75, 1.0, 1.25, 1.5})
      o << "<line x1='" << left << "' x2='" << left + pw << "' y1='" << Y(g) << "' y2='" << Y(g)
        << "' stroke='" << (g == 1.0 ? "#444" : "#ddd") << "'/><text x='" << left - 6 << "' y='" << Y(g) + 4
        << "' text-anchor='end'>" << g << "</text>\n";
    for (const ProbeRow& r : rows)
      if (r.wire == wires[k] && r.pattern == Pattern::kOneWaySpaced)
        o << "<text x='" << X(static_cast<double>(r.bytes)) << "' y='" << y0 + H - bottom + 16
          << "' text-anchor='middle'>" << size_text(r.bytes) << "</text>\n";
    int series = 0;
    for (Pattern p : all_patterns())
      for (int dir = 0; dir < 2; ++dir) {
        std::ostringstream pts;
        for (const ProbeRow& r : rows)
          if (r.wire == wires[k] && r.pattern == p && (r.from == w.a) == (dir == 0))
            pts << X(static_cast<double>(r.bytes)) << "," << Y(r.measured_s / r.model_s) << " ";
        if (pts.str().empty()) continue;
        const char* c = colours[series % 6];
        o << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='" << pts.str() << "'/>\n";
        o << "<text x='" << left + pw + 10 << "' y='" << y0 + top + 14 * series + 8 << "' fill='" << c << "'>"
          << pattern_name(p) << (dir == 0 ? " " : " (back)") << "</text>\n";
        ++series;
      }
  }
  o << "</svg>\n";
  return o.str();
}

void write_probe_report(const Topology& topology, const std::vector<ProbeRow>& rows, std::ostream& out) {
  Table table({"link", "direction", "pattern", "size", "model", "measured", "error"});
  double worst = 0;
  std::string worst_cell = "-";
  for (const auto& r : rows) {
    const auto& w = topology.wires[r.wire];
    table.add({std::to_string(w.a) + "-" + std::to_string(w.b) + " (" + fmt("%g", w.link.bandwidth_gbps) + " Gbit/s)",
               std::to_string(r.from) + "->" + std::to_string(r.to), pattern_name(r.pattern),
               std::to_string(r.bytes), fmt_time(r.model_s), fmt_time(r.measured_s), fmt("%+.1f%%", 100 * r.error())});
    if (r.bytes >= (16 << 10) && std::abs(r.error()) > std::abs(worst)) {
      worst = r.error();
      worst_cell = std::to_string(r.bytes) + " B, " + pattern_name(r.pattern);
    }
  }
  out << "\n";
  table.print(out);
  out << "\nmodel: latency + bytes / bandwidth (the cost model's); spaced: send to last byte received, median; "
         "back-to-back: time between arrivals, median\nworst error for messages of 16 KiB or more: "
      << fmt("%+.1f%%", 100 * worst) << " (" << worst_cell << ")\n";
}

StatusOr<std::int64_t> parse_message_size(const std::string& text) {
  std::size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (...) {
    end = 0;
  }
  const std::string unit = text.substr(end);
  const double mult = unit.empty() || unit == "B" ? 1 : unit == "K" || unit == "KiB" ? 1024
                      : unit == "M" || unit == "MiB"                                   ? 1 << 20
                                                                                       : 0;
  if (end == 0 || mult == 0 || !(v >= 1) || v * mult > (256 << 20))
    return invalid_argument("--sizes: '" + text.substr(0, 40) +
                            "' is not a message size from 1 B to 256 MiB; e.g. 512, 16K or 4M");
  return static_cast<std::int64_t>(v * mult);
}

}  // namespace harp::testbed
