// peer_bench's report: the table of GB/s and ratios, the goal's summary,
// each contender's fitted per-tensor overhead and bandwidth, and the chart
// (see results.hpp).
#include "results.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "contenders.hpp"

namespace meshstore::bench {

namespace {

// Per-operation overhead and bandwidth fitted to a contender's workloads:
// seconds = overhead x tensors + bytes / bandwidth, least squares on the
// relative error (every workload counts alike, whatever its time).
struct Fit {
  double overhead_s = 0;  // per tensor
  double bandwidth = 0;   // bytes per second; 0 = unbounded
};

std::optional<Fit> fit(const std::vector<std::array<double, 3>>& points) {  // tensors, bytes, s
  if (points.size() < 2) return std::nullopt;
  // Rows (n/t, b/t) x (o, c) = 1, c = 1/bandwidth.
  double snn = 0, snb = 0, sbb = 0, sn = 0, sb = 0;
  for (const auto& [n, b, t] : points) {
    const double x = n / t, y = b / t;
    snn += x * x;
    snb += x * y;
    sbb += y * y;
    sn += x;
    sb += y;
  }
  const double det = snn * sbb - snb * snb;
  Fit f;
  double o = 0, c = 0;
  if (std::fabs(det) > 1e-12 * snn * sbb) {
    o = (sn * sbb - sb * snb) / det;
    c = (sbb * 0 + snn * sb - snb * sn) / det;
  }
  if (o < 0 || c <= 0 || std::fabs(det) <= 1e-12 * snn * sbb) {
    // One term alone explains it better than a negative other one.
    const double c_only = sb / sbb, o_only = sn / snn;
    double err_c = 0, err_o = 0;
    for (const auto& [n, b, t] : points) {
      err_c += std::pow(c_only * b / t - 1, 2);
      err_o += std::pow(o_only * n / t - 1, 2);
    }
    if (err_c <= err_o) {
      o = 0;
      c = c_only;
    } else {
      o = o_only;
      c = 0;
    }
  }
  f.overhead_s = o;
  f.bandwidth = c > 0 ? 1 / c : 0;
  return f;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

// Writes results.dat and chart.gp into `out` and, when gnuplot is
// installed, renders results.png. Answers what happened, for the log.
std::string chart(const std::string& out, const std::vector<std::string>& workloads,
                  const std::vector<std::string>& contenders,
                  const std::map<std::string, std::map<std::string, meshstore::Result<double>>>& r,
                  const std::map<std::string, std::uint64_t>& bytes) {
  std::ofstream dat(out + "/results.dat");
  dat << "contender";
  for (const auto& w : workloads) dat << ' ' << w;
  dat << '\n';
  for (const auto& c : contenders) {
    dat << c;
    for (const auto& w : workloads) {
      const auto& s = r.at(w).at(c);
      dat << ' ' << (s.ok() ? fixed(static_cast<double>(bytes.at(w)) / 1e9 / *s, 3) : "-");
    }
    dat << '\n';
  }
  dat.close();
  std::ofstream gp(out + "/chart.gp");
  gp << "set terminal pngcairo noenhanced size 1200,600 font ',10'\n"
     << "set output 'results.png'\n"
     << "set title 'peer_bench: process A to process B, verified (GB/s, higher is better)'\n"
     << "set datafile missing '-'\n"
     << "set style data histogram\nset style histogram clustered gap 1\n"
     << "set style fill solid 0.8 border -1\nset boxwidth 0.9\n"
     << "set ylabel 'GB/s (log scale)'\nset logscale y\nset yrange [0.05:*]\nset grid ytics\n"
     << "set xtics rotate by -30\nset key top right\n"
     << "plot ";
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    gp << (i ? ", " : "") << "'results.dat' using " << i + 2 << ":xtic(1) title columnheader";
  }
  gp << '\n';
  gp.close();
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    return "no chart: gnuplot is not installed (apt-get install gnuplot-nox)";
  }
  const std::string cmd = "cd '" + out + "' && gnuplot chart.gp";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + out + "/chart.gp";
  return "wrote " + out + "/results.png";
}

}  // namespace

void write_results(const Args& a, const Results& r) {
  const auto& seconds = r.seconds;
  const auto& bytes = r.bytes;
  const auto& tensors = r.tensors;
  // The table: GB/s, x memcpy, x the best contender that is neither memcpy
  // nor meshstore.
  std::string md =
      "| workload | contender | seconds | GB/s | x memcpy | x memcpy (all cores) | x best other "
      "|\n";
  md += "| --- | --- | --- | --- | --- | --- | --- |\n";
  std::string json = "{\"smoke\":" + std::string(a.smoke ? "true" : "false") + ",\"results\":[";
  std::string headline;
  bool first = true;
  for (const auto& wname : a.workloads) {
    const auto& row = seconds.at(wname);
    double mem = 0, mem_all = 0, best_other = 0;
    std::string best_name;
    for (const auto& [c, s] : row) {
      if (!s.ok()) continue;
      if (c == "memcpy") mem = *s;
      if (c == "memcpy-all-cores") mem_all = *s;
      const bool baseline = c == "memcpy" || c == "memcpy-all-cores";
      if (!baseline && !is_meshstore(c) && (best_other == 0 || *s < best_other)) {
        best_other = *s;
        best_name = c;
      }
    }
    for (const auto& c : a.contenders) {
      const auto& s = row.at(c);
      if (!s.ok()) {
        md += "| " + wname + " | " + c + " | skipped: " + s.status().message() + " | | | | |\n";
        json += std::string(first ? "" : ",") + "{\"workload\":\"" + wname + "\",\"contender\":\"" +
                c + "\",\"skipped\":true}";
        first = false;
        continue;
      }
      const double gbps = static_cast<double>(bytes.at(wname)) / 1e9 / *s;
      md += "| " + wname + " | " + c + " | " + fixed(*s, 4) + " | " + fixed(gbps, 2) + " | " +
            (mem > 0 ? fixed(mem / *s, 2) : "-") + " | " +
            (mem_all > 0 ? fixed(mem_all / *s, 2) : "-") + " | " +
            (best_other > 0 ? fixed(best_other / *s, 2) : "-") + " |\n";
      json += std::string(first ? "" : ",") + "{\"workload\":\"" + wname + "\",\"contender\":\"" +
              c + "\",\"bytes\":" + std::to_string(bytes.at(wname)) +
              ",\"tensors\":" + std::to_string(tensors.at(wname)) + ",\"seconds\":" + fixed(*s, 6) +
              ",\"gbps\":" + fixed(gbps, 3) + ",\"vs_memcpy\":" + fixed(mem > 0 ? mem / *s : 0, 3) +
              ",\"vs_memcpy_all_cores\":" + fixed(mem_all > 0 ? mem_all / *s : 0, 3) +
              ",\"vs_best_other\":" + fixed(best_other > 0 ? best_other / *s : 0, 3) + "}";
      first = false;
    }
    // The goal's figures: meshstore as it picks for the pair, and each
    // publishing mode (direct, copy, in place).
    std::string line;
    for (const char* c : {"meshstore", "meshstore-direct", "meshstore-revocable", "meshstore-copy",
                          "meshstore-inplace", "meshstore-python"}) {
      if (!row.count(c) || !row.at(c).ok() || best_other <= 0) continue;
      line += std::string(line.empty() ? "" : ", ") + c + " " + fixed(best_other / *row.at(c), 2) +
              " x";
    }
    if (!line.empty()) {
      headline += "- " + wname + ": " + line + " the best other contender (" + best_name + ")\n";
    }
  }
  json += "],\"fits\":[";
  // Fitted per-tensor overhead and bandwidth, for contenders measured on
  // workloads of different tensor counts.
  std::string fits =
      "| contender | overhead per tensor (us) | bandwidth (GB/s) |\n| --- | --- | --- |\n";
  bool any_fit = false;
  first = true;
  for (const auto& c : a.contenders) {
    std::vector<std::array<double, 3>> points;
    for (const auto& wname : a.workloads) {
      const auto& s = seconds.at(wname).at(c);
      if (s.ok()) {
        points.push_back(
            {static_cast<double>(tensors.at(wname)), static_cast<double>(bytes.at(wname)), *s});
      }
    }
    auto f = fit(points);
    if (!f) continue;
    any_fit = true;
    fits += "| " + c + " | " + fixed(f->overhead_s * 1e6, 2) + " | " +
            (f->bandwidth > 0 ? fixed(f->bandwidth / 1e9, 2) : "unbounded") + " |\n";
    json += std::string(first ? "" : ",") + "{\"contender\":\"" + c +
            "\",\"overhead_us\":" + fixed(f->overhead_s * 1e6, 3) +
            ",\"bandwidth_gbps\":" + fixed(f->bandwidth / 1e9, 3) + "}";
    first = false;
  }
  json += "]}\n";
  if (!headline.empty())
    md = "Goal: meshstore (the transport it picks for the pair) against the best other "
         "contender:\n\n" +
         headline + "\n" + md;
  md += "\nContenders:\n\n";
  for (const auto& c : a.contenders) md += "- `" + c + "`: " + describe(c) + "\n";
  if (any_fit) {
    md +=
        "\nFitted per-tensor overhead and bandwidth (seconds = overhead x tensors + bytes / "
        "bandwidth, least squares on the relative error over the workloads above):\n\n" +
        fits;
  }
  std::ofstream(a.out + "/results.md") << md;
  std::ofstream(a.out + "/results.json") << json;
  const std::string drawn = chart(a.out, a.workloads, a.contenders, seconds, bytes);
  std::printf("%s", md.c_str());
  std::printf("\npeer_bench: wrote %s/results.md and %s/results.json; %s\n", a.out.c_str(),
              a.out.c_str(), drawn.c_str());
}

}  // namespace meshstore::bench
