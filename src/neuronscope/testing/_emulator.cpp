// Emulated AWS Neuron device for CPU-only CI (neuronscope.testing).
//
// TorchNeuron enters PyTorch's profiler by registering a Kineto *child*
// profiler (libkineto::api().registerProfilerFactory). Kineto then
//   configure()  -> asks each child for a session (with the selected activity
//                   types and the Kineto Config, whose CUSTOM_CONFIG line is
//                   _ExperimentalConfig.custom_profiler_config),
//   start()/stop() the session around the capture window,
//   pushCorrelationId()/popCorrelationId() on every aten op entry/exit,
//   processTrace(logger, getLinkedActivity, start, end) after stop, and
//   getTraceBuffer() to take ownership of the session's activities.
// This file implements such a child profiler. Instead of reading a real
// Neuron runtime it derives "device executions" from the ops it saw (the
// leaf ops, or the outermost ops reaching a backend; see OpKind): each gets a
// host runtime event, a device kernel linked to the op (so key_averages()
// attributes device time to it) and a hardware-lane event; at processTrace
// time it also writes placeholder raw files in the Neuron runtime's
// directory layouts.
//
// Build flags (see __init__.py): -I <torch>/include/kineto -DUSE_KINETO
// -DFMT_HEADER_ONLY.

#include <torch/extension.h>

#include <libkineto.h>

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace fs = std::filesystem;
using libkineto::ActivityType;
using libkineto::GenericTraceActivity;

namespace {

// ---------------------------------------------------------------------------
// Process-wide settings, changed from Python between profiles.
// ---------------------------------------------------------------------------
struct Settings {
  std::string layout = "session"; // "session" | "model"
  std::string attribution = "leaf"; // "leaf" | "backend" (see OpKind)
  double deviceTimeRatio = 0.5;
  bool verbose = false;
  // Ops whose default overload is CompositeImplicitAutograd: they decompose
  // before reaching a backend (filled from Python, used by "backend").
  std::shared_ptr<const std::set<std::string>> decomposing =
      std::make_shared<const std::set<std::string>>();
};
std::mutex gSettingsMutex;
Settings gSettings;

Settings currentSettings() {
  std::lock_guard<std::mutex> g(gSettingsMutex);
  return gSettings;
}

// A fake EC2 instance id ("i-" + 17 hex digits, like the real ones).
constexpr const char* kInstanceId = "i-00000000000e1a7ed";
// Chrome-trace rows (resource ids) on the device "process" (pid 0).
constexpr int32_t kDeviceId = 0;
constexpr int32_t kKernelLane = 0; // per-op NEFF kernels (CONCURRENT_KERNEL)
constexpr int32_t kHwLane = 4; // nc_exec_running (GPU_USER_ANNOTATION)
// Sort the device below host processes (Kineto's kExceedMaxPid, which lives
// in output_base.h, a header we do not need otherwise).
constexpr int64_t kDeviceSortIndex = 5000000 + kDeviceId;

// ac2g flow ids, unique in the process. They double as the emulated events'
// correlation ids; starting at 2^30 keeps them apart from PyTorch's op ids.
std::atomic<uint32_t> gFlowId{1u << 30};

// Summary of the last session that reached processTrace, and the last
// session directory written per profile_output_dir (read from Python).
std::mutex gInfoMutex;
std::map<std::string, std::string> gLastInfo;
std::map<std::string, std::string> gLastSessionDir;

void vlog(const std::string& msg) {
  if (currentSettings().verbose) {
    std::cerr << "[neuronscope emulator] " << msg << std::endl;
  }
}

// ---------------------------------------------------------------------------
// custom_profiler_config: "key:value;key:value" (the format TorchNeuron
// parses). Kineto puts it on one "CUSTOM_CONFIG=..." line, so '#', '=', ';'
// and newlines cannot appear raw; the Python NeuronConfig %-encodes them.
// ---------------------------------------------------------------------------
struct NeuronOptions {
  bool present = false; // a profile_output_dir was given
  std::string outputDir;
  uint64_t maxEventsPerNc = 1000000;
  // NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP (Neuron 2.33+, model mode): executions of
  // each NEFF to skip before the one captured. Read from the environment at configure().
  uint64_t numWarmup = 0;
  bool captureSet = false;
  std::set<uint32_t> captureNcs;
  bool device = true, runtime = true, cpuUtil = false, hostMemory = false;
};

std::string pctDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool parseBool(const std::string& v) {
  return v == "1" || v == "true" || v == "True" || v == "yes";
}

std::set<uint32_t> parseNcList(const std::string& v) { // "0,1,2-5"
  std::set<uint32_t> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto dash = item.find('-');
    if (dash == std::string::npos) {
      out.insert(std::stoul(item));
    } else {
      uint32_t a = std::stoul(item.substr(0, dash));
      uint32_t b = std::stoul(item.substr(dash + 1));
      for (uint32_t i = std::min(a, b); i <= std::max(a, b); ++i) out.insert(i);
    }
  }
  return out;
}

NeuronOptions parseOptions(const std::string& custom) {
  NeuronOptions o;
  if (const char* w = std::getenv("NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP")) {
    try {
      o.numWarmup = std::stoull(w);
    } catch (const std::exception&) {
      std::cerr << "[neuronscope emulator] ignoring NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP='" << w << "'" << std::endl;
    }
  }
  std::stringstream ss(custom);
  std::string item;
  while (std::getline(ss, item, ';')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) continue;
    std::string key = item.substr(0, colon);
    std::string val = pctDecode(item.substr(colon + 1));
    try {
      if (key == "profile_output_dir") {
        o.outputDir = val;
        o.present = !val.empty();
      } else if (key == "max_events_per_nc") {
        o.maxEventsPerNc = std::stoull(val);
      } else if (key == "capture_enabled_for_nc") {
        o.captureSet = true;
        o.captureNcs = parseNcList(val);
      } else if (key == "device_profile") {
        o.device = parseBool(val);
      } else if (key == "system_profile") {
        o.runtime = parseBool(val);
      } else if (key == "cpu_util") {
        o.cpuUtil = parseBool(val);
      } else if (key == "host_memory") {
        o.hostMemory = parseBool(val);
      } // neff_cache_dir, precache_node_info: accepted, no effect here.
    } catch (const std::exception& e) {
      std::cerr << "[neuronscope emulator] ignoring bad config item '" << item
                << "': " << e.what() << std::endl;
    }
  }
  return o;
}

// Deterministic 15-digit NEFF id from the op's name and input shapes (eager
// mode compiles one NEFF per op signature). PyTorch 2.13 attaches "Input
// Dims" to its CPU ops only after processTrace, so in practice: per name.
uint64_t neffId(const std::string& key) {
  uint64_t h = 1469598103934665603ull; // FNV-1a
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return 100000000000000ull + h % 900000000000000ull;
}

// How an op recorded by the profiler relates to emulated device work.
//   kContainer  not an operator (autograd nodes, user scopes, "torch::" ...)
//   kNoCompute  moves no data on a device: views, allocation, metadata
//   kDecomposes CompositeImplicitAutograd: never reaches the backend itself
//   kDevice     an operator the emulated device executes as one NEFF
// Attribution rules (Settings::attribution):
//   "leaf"    a kDevice op with no kDevice op nested in it (views and other
//             non-device ops do not count as nesting)
//   "backend" the outermost kDevice op: the op at which the dispatcher
//             reaches the backend; the ops it calls run inside its NEFF.
enum class OpKind { kContainer, kNoCompute, kDecomposes, kDevice };

OpKind classify(const std::string& name, const Settings& settings) {
  static const std::set<std::string> kNoCompute = {
      "aten::empty", "aten::empty_strided", "aten::empty_like",
      "aten::view", "aten::_unsafe_view", "aten::reshape",
      "aten::_reshape_alias", "aten::as_strided", "aten::expand",
      "aten::expand_as", "aten::t", "aten::transpose", "aten::permute",
      "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias",
      "aten::slice", "aten::select", "aten::resize_", "aten::lift_fresh",
      "aten::result_type", "aten::set_", "aten::unbind", "aten::split",
      "aten::chunk", "aten::narrow", "aten::numpy_T", "aten::contiguous",
      "aten::is_nonzero", "aten::_local_scalar_dense", "aten::item",
      // aten::to with nothing nested returned its input unchanged.
      "aten::to"};
  auto pos = name.find("::");
  if (pos == std::string::npos || pos == 0) return OpKind::kContainer;
  std::string ns = name.substr(0, pos);
  if (ns == "autograd" || ns == "torch" || ns == "profiler") return OpKind::kContainer;
  if (kNoCompute.count(name)) return OpKind::kNoCompute;
  if (settings.decomposing->count(name)) return OpKind::kDecomposes;
  return OpKind::kDevice;
}

std::string timestampDirName() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d_%H%M%S", &tm);
  char out[48];
  std::snprintf(out, sizeof(out), "%s_%06lld", buf,
                static_cast<long long>(us % 1000000));
  return out;
}

void writeFile(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << content;
}

// One emulated NEFF execution on NeuronCore 0, derived from one op.
struct Execution {
  uint64_t neff;
  std::string opName;
  std::string inputDims;
  int64_t startNs;
  int64_t durNs;
  bool dropped;
  int64_t rtStartNs = 0; // its nrta_execute_schedule on the host
  int64_t rtDurNs = 0;
  int64_t threadId = 0;
};

// Per-CPU (busy, total) jiffies from /proc/stat ("cpuN user nice system idle iowait ...").
std::vector<std::pair<uint64_t, uint64_t>> readCpuStat() {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::ifstream f("/proc/stat");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream ss(line.substr(line.find(' ')));
    uint64_t v, total = 0, idle = 0;
    for (int i = 0; ss >> v; ++i) {
      total += v;
      if (i == 3 || i == 4) idle += v; // idle, iowait
    }
    out.emplace_back(total - idle, total);
  }
  return out;
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------
// The session: one per profiling window.
// ---------------------------------------------------------------------------
class EmulatorSession : public libkineto::IActivityProfilerSession {
 public:
  EmulatorSession(const std::set<ActivityType>& types, const NeuronOptions& opts)
      : opts_(opts), settings_(currentSettings()) {
    runtimeEvents_ = types.count(ActivityType::PRIVATEUSE1_RUNTIME) ||
        types.count(ActivityType::PRIVATEUSE1_DRIVER);
    kernels_ = types.count(ActivityType::CONCURRENT_KERNEL) > 0;
    hwLane_ = types.count(ActivityType::GPU_USER_ANNOTATION) > 0;
    // Raw files only when the device activity (PrivateUse1) was requested
    // and a profile_output_dir came through the custom config.
    writeFiles_ = kernels_ && opts_.present;
    traceBuffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    traceBuffer_->span = libkineto::TraceSpan(0, 0, "NeuronEmulator");
    traceBuffer_->gpuOpCount = 0;
    vlog("session configured: layout=" + settings_.layout +
         " kernels=" + std::to_string(kernels_) +
         " files=" + std::to_string(writeFiles_));
  }

  void start() override {
    std::lock_guard<std::mutex> g(mutex_);
    recording_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
    startNs_ = nowNs();
    cpuAtStart_ = readCpuStat();
  }

  void stop() override {
    std::lock_guard<std::mutex> g(mutex_);
    recording_ = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  // Called on the op's thread at every op entry / exit. We only record the
  // nesting; names and times come from the linked CPU ops in processTrace.
  void pushCorrelationId(uint64_t id) override {
    std::lock_guard<std::mutex> g(mutex_);
    if (!recording_) return;
    auto& stack = stacks_[std::this_thread::get_id()];
    Node n;
    n.id = id;
    n.parent = stack.empty() ? -1 : static_cast<int64_t>(stack.back());
    nodes_.push_back(n);
    stack.push_back(nodes_.size() - 1);
  }

  void popCorrelationId() override {
    std::lock_guard<std::mutex> g(mutex_);
    auto it = stacks_.find(std::this_thread::get_id());
    if (it == stacks_.end() || it->second.empty()) return; // pushed before start
    popOrder_.push_back(it->second.back());
    it->second.pop_back();
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    // Without getLinkedActivity nothing can be attributed.
    (void)logger;
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback getLinkedActivity,
                    int64_t /*startTime*/, int64_t /*endTime*/) override {
    std::lock_guard<std::mutex> g(mutex_);
    if (!traceBuffer_ || processed_) return;
    processed_ = true;

    // 1. Ops that execute on the emulated device (see OpKind). popOrder_
    //    is post-order per thread: children come before their parent.
    for (Node& n : nodes_) {
      n.op = getLinkedActivity(static_cast<int32_t>(n.id));
      n.kind = (n.op && n.op->type() == ActivityType::CPU_OP)
          ? classify(n.op->name(), settings_) : OpKind::kContainer;
    }
    std::unordered_map<const libkineto::ITraceActivity*, int64_t> childrenEnd;
    for (const Node& n : nodes_) {
      if (n.parent < 0 || !n.op || !nodes_[n.parent].op || n.op->duration() < 0) continue;
      int64_t& e = childrenEnd[nodes_[n.parent].op];
      e = std::max(e, n.op->timestamp() + n.op->duration());
    }
    bool leafRule = settings_.attribution != "backend";
    struct Leaf { const libkineto::ITraceActivity* op; };
    std::vector<Leaf> leaves;
    for (size_t idx : popOrder_) {
      Node& n = nodes_[idx];
      bool device = n.kind == OpKind::kDevice;
      if ((device || n.deviceBelow) && n.parent >= 0) nodes_[n.parent].deviceBelow = true;
      if (!device) continue;
      if (leafRule) {
        if (!n.deviceBelow) leaves.push_back({n.op});
      } else {
        bool outermost = true;
        for (int64_t p = n.parent; p >= 0 && outermost; p = nodes_[p].parent) {
          outermost = nodes_[p].kind != OpKind::kDevice;
        }
        if (outermost) leaves.push_back({n.op});
      }
    }
    std::sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) {
      return a.op->timestamp() < b.op->timestamp();
    });

    // 2. Events. Op [s, s+d]: runtime event [g+(s+d-g)/4, g+(s+d-g)/2] where
    //    g = max(s, end of the ops nested in it) -- so it nests under the op
    //    only (g = s for a leaf); the kernel starts when the runtime event
    //    ends (or when NC0 is free: one NeuronCore executes one NEFF at a
    //    time) and lasts ratio*d.
    bool nc0Captured = !opts_.captureSet || opts_.captureNcs.count(0);
    int64_t busyUntil = 0;
    uint64_t executed = 0;
    // The runtime's per-core buffer keeps the newest max_events_per_nc events: older ones are
    // overwritten (troubleshooting.rst, "Dropped events in system profile").
    uint64_t toDrop = (nc0Captured && leaves.size() > opts_.maxEventsPerNc)
        ? leaves.size() - opts_.maxEventsPerNc : 0;
    auto& span = traceBuffer_->span;
    for (const Leaf& leaf : leaves) {
      const auto* op = leaf.op;
      int64_t s = op->timestamp(), d = std::max<int64_t>(op->duration(), 0);
      std::string dims = op->getMetadataValue("Input Dims");
      uint64_t neff = neffId(op->name() + "|" + dims);
      std::string neffName = "neff_" + std::to_string(neff);
      uint32_t flow = gFlowId.fetch_add(1);
      auto ce = childrenEnd.find(op);
      int64_t g = ce == childrenEnd.end() ? s : std::clamp(ce->second, s, s + d);
      int64_t rtStart = g + (s + d - g) / 4, rtEnd = g + (s + d - g) / 2;

      if (runtimeEvents_) {
        auto& rt = emplace(ActivityType::PRIVATEUSE1_RUNTIME, "nrta_execute_schedule");
        rt.startTime = rtStart;
        rt.endTime = rtEnd;
        rt.device = static_cast<int32_t>(op->deviceId()); // host pid
        rt.resource = static_cast<int32_t>(op->resourceId()); // op's thread
        rt.threadId = op->getThreadId();
        rt.id = static_cast<int32_t>(flow);
        rt.linked = op;
        rt.flow.id = flow;
        rt.flow.type = libkineto::kLinkAsyncCpuGpu;
        rt.flow.start = 1;
        rt.addMetadata("correlation", flow);
        rt.addMetadataQuoted("neff", neffName);
      }

      if (!nc0Captured) continue;
      Execution ex{neff, op->name(), dims, 0, 0, false};
      ex.rtStartNs = rtStart;
      ex.rtDurNs = rtEnd - rtStart;
      ex.threadId = static_cast<int64_t>(op->getThreadId());
      ex.startNs = std::max(rtEnd, busyUntil);
      ex.durNs = std::max<int64_t>(1, std::llround(settings_.deviceTimeRatio * d));
      busyUntil = ex.startNs + ex.durNs; // a dropped execution still ran; only its events are lost
      if (dropped_ < toDrop) {
        ex.dropped = true;
        ++dropped_;
      } else {
        ++executed;
      }
      executions_.push_back(ex);
      if (ex.dropped || !kernels_) continue;

      std::string shortName = op->name().substr(op->name().find("::") + 2);
      auto& k = emplace(ActivityType::CONCURRENT_KERNEL, neffName + ":" + shortName);
      k.startTime = ex.startNs;
      k.endTime = ex.startNs + ex.durNs;
      k.device = kDeviceId;
      k.resource = kKernelLane;
      k.threadId = kKernelLane;
      k.id = static_cast<int32_t>(flow);
      k.linked = op; // this link is what attributes device time to the op
      k.flow.id = flow;
      k.flow.type = libkineto::kLinkAsyncCpuGpu;
      k.flow.start = 0;
      k.addMetadata("device", 0);
      k.addMetadata("nc", 0);
      k.addMetadata("correlation", flow);
      k.addMetadataQuoted("neff", neffName);
      traceBuffer_->gpuOpCount++;

      if (hwLane_) {
        // Hardware lane, unlinked: device time must not count twice.
        auto& hw = emplace(ActivityType::GPU_USER_ANNOTATION, "nc_exec_running");
        hw.startTime = k.startTime;
        hw.endTime = k.endTime;
        hw.device = kDeviceId;
        hw.resource = kHwLane;
        hw.threadId = kHwLane;
        hw.id = 0; // no "External id" in the chrome trace
        hw.addMetadata("correlation", flow);
        hw.addMetadataQuoted("neff", neffName);
      }
    }
    if (!traceBuffer_->activities.empty()) {
      span.startTime = traceBuffer_->activities.front()->startTime;
      span.endTime = std::max(busyUntil, traceBuffer_->activities.back()->endTime);
    }
    span.opCount = traceBuffer_->gpuOpCount;

    // 3. Hand the activities to the logger. It keeps pointers, so they stay
    //    owned by traceBuffer_ until getTraceBuffer() passes it to Kineto.
    for (auto& act : traceBuffer_->activities) act->log(logger);

    // 4. Raw files, written before the profiler's stop returns.
    std::string sessionDir;
    if (writeFiles_) sessionDir = writeRawFiles();
    {
      std::lock_guard<std::mutex> gi(gInfoMutex);
      gLastInfo = {
          {"leaf_ops", std::to_string(leaves.size())},
          {"executions", std::to_string(executed)},
          {"events_dropped", std::to_string(dropped_)},
          {"activities", std::to_string(traceBuffer_->activities.size())},
          {"session_dir", sessionDir},
          {"layout", settings_.layout}};
      if (!sessionDir.empty()) gLastSessionDir[opts_.outputDir] = sessionDir;
    }
    vlog("processTrace: " + std::to_string(leaves.size()) + " leaf ops, " +
         std::to_string(dropped_) + " dropped, files in '" + sessionDir + "'");
    if (dropped_ > 0 && kernels_) {
      // Written to fd 2 by native code, as a runtime would (where the real runtime prints it is
      // not documented; Neuron Explorer prints this sentence when it processes the profile).
      std::cerr << "[neuron runtime (neuronscope emulator)] Warning: " << dropped_
                << " trace events were dropped during capture (stored " << executed << " out of "
                << (executed + dropped_) << " total events). Consider increasing buffer size, "
                << "reducing trace duration, or filtering events." << std::endl;
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (!kernels_) return nullptr;
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        kDeviceId, kDeviceSortIndex, "NeuronCore 0",
        "neuron:0 (emulated)"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    if (!kernels_) return {};
    return {{kKernelLane, kKernelLane, kDeviceId, "NC0 NEFF executions"},
            {kHwLane, kHwLane, kDeviceId, "neuron_hw/NC0:4"}};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    std::lock_guard<std::mutex> g(mutex_);
    return std::move(traceBuffer_);
  }

 private:
  struct Node {
    uint64_t id;
    int64_t parent;
    bool deviceBelow = false; // a kDevice op is nested in this one
    const libkineto::ITraceActivity* op = nullptr; // filled in processTrace
    OpKind kind = OpKind::kContainer;
  };

  GenericTraceActivity& emplace(ActivityType type, const std::string& name) {
    traceBuffer_->emplace_activity(traceBuffer_->span, type, name);
    return *traceBuffer_->activities.back();
  }

  // Returns the directory holding this session's files.
  std::string writeRawFiles() {
    std::set<uint32_t> cores = opts_.captureNcs;
    if (!opts_.captureSet) {
      const char* n = std::getenv("NEURON_RT_NUM_CORES");
      int visible = n ? std::max(1, std::atoi(n)) : 1;
      for (int i = 0; i < visible; ++i) cores.insert(i);
    }
    fs::path instance = fs::path(opts_.outputDir) /
        (std::string(kInstanceId) + "_pid_" + std::to_string(getpid()));
    fs::path session = instance / timestampDirName();
    for (int i = 1; fs::exists(session); ++i) {
      session = instance / (timestampDirName() + "_" + std::to_string(i));
    }
    bool systemFiles = opts_.runtime || opts_.cpuUtil || opts_.hostMemory;
    bool model = settings_.layout == "model";
    std::error_code ec;
    fs::create_directories(instance, ec);
    if (!model || systemFiles) fs::create_directories(session, ec);

    // NEFF placeholders, one per distinct NEFF.
    std::map<uint64_t, const Execution*> firstRun;
    for (const auto& ex : executions_) firstRun.emplace(ex.neff, &ex);
    auto neffText = [](const Execution& ex) {
      return "NEFF placeholder (neuronscope emulator)\nop=" + ex.opName +
          "\ninput_dims=" + ex.inputDims + "\n";
    };

    if (opts_.device && !model) {
      for (const auto& [id, ex] : firstRun) {
        writeFile(session / ("neff_" + std::to_string(id) + "_vnc_0.neff"), neffText(*ex));
      }
      for (uint32_t nc : cores) {
        std::ostringstream nt;
        if (nc == 0) {
          for (const auto& ex : executions_) {
            if (ex.dropped) continue;
            if (nt.tellp() == 0) nt << "NTFF placeholder (neuronscope emulator)\nnc=0\n";
            nt << "neff_" << ex.neff << " " << ex.startNs << " " << ex.durNs << "\n";
          }
        } // other cores never ran: empty NTFF, as on real hardware
        writeFile(session / ("profile_nc_" + std::to_string(nc) + "_session_0.ntff"), nt.str());
      }
    }
    if (opts_.device && model && cores.count(0)) {
      // Model mode: the first execution of each NEFF after NUM_WARMUP executions, one
      // NEFF/NTFF pair each. A NEFF with no such execution gets no NTFF (it did not run in the
      // window, as far as the device profile goes).
      for (const auto& [id, ex] : firstRun) {
        const Execution* first = nullptr;
        uint64_t seen = 0;
        for (const auto& e : executions_) {
          if (e.neff != id) continue;
          if (seen++ < opts_.numWarmup) continue;
          if (!e.dropped) { first = &e; break; }
        }
        writeFile(instance / ("neff_" + std::to_string(id) + ".neff"), neffText(*ex));
        if (!first) continue;
        std::ostringstream nt;
        nt << "NTFF placeholder (neuronscope emulator)\nnc=0\nneff_" << id << " "
           << first->startNs << " " << first->durNs << "\n";
        writeFile(instance / (std::to_string(id) + "_instid_0_vnc_0.ntff"), nt.str());
      }
    }
    // Placeholder formats, read by the fake neuron-explorer (neuronscope.testing):
    //   ntrace.pb:   "event <name> <start_ns> <duration_ns> <thread_id> <lnc> neff_<id>" per event,
    //                "capture stored=<S> total=<T> dropped=<D> max_events_per_nc=<M>"
    //   host_mem.pb: "sample <timestamp_ns> <usage_bytes> <percent_usage>"
    //   cpu_util.pb: "sample <timestamp_ns> <cpu_id> <util_percent>"
    if (opts_.runtime) {
      std::ostringstream nt;
      nt << "ntrace placeholder (neuronscope emulator)\n";
      uint64_t stored = 0;
      for (const auto& ex : executions_) {
        nt << "event nrta_execute_schedule " << ex.rtStartNs << " " << ex.rtDurNs << " "
           << ex.threadId << " 0 neff_" << ex.neff << "\n";
        if (!ex.dropped) {
          ++stored;
          nt << "event nc_exec_running " << ex.startNs << " " << ex.durNs << " 0 0 neff_"
             << ex.neff << "\n";
        }
      }
      nt << "capture stored=" << stored << " total=" << executions_.size()
         << " dropped=" << dropped_ << " max_events_per_nc=" << opts_.maxEventsPerNc << "\n";
      writeFile(session / "ntrace.pb", nt.str());
      writeFile(session / "trace_info.pb",
                "trace_info placeholder (neuronscope emulator)\ninstance=" +
                    std::string(kInstanceId) + "\npid=" + std::to_string(getpid()) + "\n");
    }
    int64_t endNs = nowNs();
    if (opts_.cpuUtil) {
      std::ostringstream cu;
      cu << "cpu_util placeholder (neuronscope emulator)\n";
      auto after = readCpuStat();
      for (size_t i = 0; i < after.size(); ++i) {
        double util = 0.0;
        if (i < cpuAtStart_.size() && after[i].second > cpuAtStart_[i].second) {
          util = 100.0 * double(after[i].first - cpuAtStart_[i].first) /
              double(after[i].second - cpuAtStart_[i].second);
        }
        cu << "sample " << endNs << " " << i << " " << util << "\n";
      }
      writeFile(session / "cpu_util.pb", cu.str());
    }
    if (opts_.hostMemory) {
      std::ostringstream hm;
      hm << "host_mem placeholder (neuronscope emulator)\n";
      struct sysinfo si{};
      if (sysinfo(&si) == 0 && si.totalram > 0) {
        uint64_t total = uint64_t(si.totalram) * si.mem_unit;
        uint64_t used = total - uint64_t(si.freeram) * si.mem_unit;
        for (int64_t ts : {startNs_, endNs}) {
          hm << "sample " << ts << " " << used << " " << (100.0 * double(used) / double(total)) << "\n";
        }
      }
      writeFile(session / "host_mem.pb", hm.str());
    }

    fs::path home = (!model || systemFiles) ? session : instance;
    return home.string();
  }

  NeuronOptions opts_;
  Settings settings_;
  bool runtimeEvents_ = false, kernels_ = false, hwLane_ = false, writeFiles_ = false;
  bool recording_ = false, processed_ = false;
  std::mutex mutex_;
  std::unordered_map<std::thread::id, std::vector<size_t>> stacks_;
  std::vector<Node> nodes_;
  std::vector<size_t> popOrder_;
  std::vector<Execution> executions_;
  uint64_t dropped_ = 0;
  int64_t startNs_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> cpuAtStart_;
  std::unique_ptr<libkineto::CpuTraceBuffer> traceBuffer_;
};

// ---------------------------------------------------------------------------
// The child profiler Kineto asks for sessions.
// ---------------------------------------------------------------------------
class EmulatorProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string kName = "NeuronEmulator";
    return kName;
  }

  const std::set<ActivityType>& availableActivities() const override {
    static const std::set<ActivityType> kTypes = {
        ActivityType::PRIVATEUSE1_RUNTIME, ActivityType::PRIVATEUSE1_DRIVER,
        ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_USER_ANNOTATION};
    return kTypes;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config& config) override {
    if (!types.count(ActivityType::PRIVATEUSE1_RUNTIME) &&
        !types.count(ActivityType::PRIVATEUSE1_DRIVER)) {
      return nullptr;
    }
    return std::make_unique<EmulatorSession>(types, parseOptions(config.getCustomConfig()));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }
};

bool registerOnce() {
  static std::once_flag once;
  static bool done = false;
  std::call_once(once, [] {
    libkineto::api().registerProfilerFactory(
        [] { return std::make_unique<EmulatorProfiler>(); });
    done = true;
  });
  return done;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "neuronscope emulated Neuron device (Kineto child profiler)";
  m.def("register_profiler", &registerOnce,
        "Register the emulator's Kineto child profiler (once per process).");
  m.def("set_layout", [](const std::string& layout) {
    if (layout != "session" && layout != "model") {
      throw std::invalid_argument("layout must be 'session' or 'model'");
    }
    std::lock_guard<std::mutex> g(gSettingsMutex);
    gSettings.layout = layout;
  });
  m.def("set_attribution", [](const std::string& rule) {
    if (rule != "leaf" && rule != "backend") {
      throw std::invalid_argument("attribution must be 'leaf' or 'backend'");
    }
    std::lock_guard<std::mutex> g(gSettingsMutex);
    gSettings.attribution = rule;
  });
  m.def("set_decomposing_ops", [](const std::vector<std::string>& names) {
    auto set = std::make_shared<const std::set<std::string>>(names.begin(), names.end());
    std::lock_guard<std::mutex> g(gSettingsMutex);
    gSettings.decomposing = set;
  });
  m.def("set_device_time_ratio", [](double r) {
    if (!(r >= 0.0)) throw std::invalid_argument("device_time_ratio must be >= 0");
    std::lock_guard<std::mutex> g(gSettingsMutex);
    gSettings.deviceTimeRatio = r;
  });
  m.def("set_verbose", [](bool v) {
    std::lock_guard<std::mutex> g(gSettingsMutex);
    gSettings.verbose = v;
  });
  m.def("last_session_info", [] {
    std::lock_guard<std::mutex> g(gInfoMutex);
    return gLastInfo;
  }, "Summary of the last session that was processed.");
  m.def("last_session_dir", [](const std::string& outputDir) {
    std::lock_guard<std::mutex> g(gInfoMutex);
    auto it = gLastSessionDir.find(outputDir);
    return it == gLastSessionDir.end() ? std::string() : it->second;
  }, "Directory of the last files written for a profile_output_dir.");
  m.attr("INSTANCE_ID") = kInstanceId;
}
