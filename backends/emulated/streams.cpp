#include "streams.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "execution.h"
#include "tessera/error.h"

namespace tessera::emu {
namespace {

struct Item {
  std::function<void()> work;           // kernel or copy; empty for markers and waits
  std::shared_ptr<EventToken> reached;  // set when this item is a marker
  std::shared_ptr<EventToken> waits;    // set when this item waits for another stream's marker
};

// All queues live here, keyed by id (creation order); one mutex orders submission and draining.
// Queued work runs while the mutex is held: it is kernels and copies, which never submit more.
struct Scheduler {
  std::recursive_mutex mutex;
  std::map<int, std::deque<Item>> queues;
  int next_id = 0;
  uint64_t picks = 0;
};
Scheduler& scheduler() {
  static Scheduler* s = new Scheduler;  // never destroyed: queues may outlive static destruction order
  return *s;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool runnable(const std::deque<Item>& q) { return !q.empty() && (!q.front().waits || q.front().waits->done); }

// Runs one item of a runnable queue chosen by the schedule; false when none can run.
bool step(Scheduler& s) {
  std::vector<int> ready;
  for (auto& [id, q] : s.queues) {
    if (runnable(q)) ready.push_back(id);
  }
  if (ready.empty()) return false;
  int pick = ready.front();
  switch (settings().schedule) {
    case Schedule::forward: break;
    case Schedule::reverse: pick = ready.back(); break;
    case Schedule::random: {
      std::mt19937_64 rng(settings().seed * 0xD1B54A32D192ED03ULL + s.picks);
      pick = ready[rng() % ready.size()];
      break;
    }
  }
  ++s.picks;
  std::deque<Item>& q = s.queues[pick];
  Item item = std::move(q.front());
  q.pop_front();
  if (item.work) item.work();
  if (item.reached) item.reached->done = true, item.reached->when_ms = now_ms();
  return true;
}

[[noreturn]] void stuck() {
  throw Error("emulated: streams wait on each other in a cycle; queued work can never run");
}
}  // namespace

Queue::Queue(int device) : device_(device) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  id_ = s.next_id++;
  s.queues[id_];
}

Queue::~Queue() {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  try {
    drain(this);
  } catch (...) {
    // A failing kernel in a stream being destroyed: nothing can report it any more.
  }
  s.queues.erase(id_);
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

Queue*& current_queue(int device) {
  thread_local Queue* queues[kMaxDevices] = {};
  TESSERA_CHECK(device >= 0 && device < kMaxDevices, "emulated", "device index ", device, " out of range");
  return queues[device];
}

namespace {
struct Allocations {
  std::mutex mutex;
  std::map<const char*, std::pair<size_t, int>> ranges;  // start -> (bytes, device)
};
Allocations& allocations() {
  static Allocations* a = new Allocations;
  return *a;
}
}  // namespace

void add_allocation(const void* p, size_t bytes, int device) {
  Allocations& a = allocations();
  std::lock_guard lock(a.mutex);
  a.ranges[static_cast<const char*>(p)] = {bytes, device};
}

void remove_allocation(const void* p) {
  Allocations& a = allocations();
  std::lock_guard lock(a.mutex);
  a.ranges.erase(static_cast<const char*>(p));
}

int owner(const void* p) {
  const char* c = static_cast<const char*>(p);
  Allocations& a = allocations();
  std::lock_guard lock(a.mutex);
  auto it = a.ranges.upper_bound(c);
  if (it == a.ranges.begin()) return -1;
  --it;
  return c < it->first + it->second.first ? it->second.second : -1;
}

void check_argument(const void* p) {
  if (!p) return;
  const int dev = owner(p);
  if (dev >= 0 && dev != current_device()) {
    throw Error(detail::concat("emulated: a kernel launched on emulated:", current_device(), " was given memory of emulated:", dev,
                               " (set the device first; without peer access a GPU faults or reads garbage)"));
  }
}

namespace {
thread_local WorkList* t_capture[kMaxDevices] = {};
}  // namespace

namespace {
thread_local CaptureMode t_capture_mode = CaptureMode::thread_local_mode;
thread_local std::array<bool, kMaxDevices> t_capture_invalidated{};
}  // namespace
void set_capture(int device, WorkList* list) {
  t_capture[device] = list;
  if (list) t_capture_invalidated[device] = false;
}
CaptureMode exchange_capture_mode(CaptureMode mode) { return std::exchange(t_capture_mode, mode); }
bool unsafe_call_allowed(int device) {
  if (!t_capture[device] || t_capture_mode == CaptureMode::relaxed) return true;
  t_capture_invalidated[device] = true;
  return false;
}
bool take_capture_invalidated(int device) { return std::exchange(t_capture_invalidated[device], false); }
WorkList* capture(int device) { return t_capture[device]; }

void submit(Queue* q, std::function<void()> work) {
  if (WorkList* list = t_capture[current_device()]) {
    list->push_back(std::move(work));
    return;
  }
  if (!q) {
    work();
    return;
  }
  if (q->device() != current_device()) {
    throw Error(detail::concat("emulated: work for emulated:", current_device(), " submitted to a stream of emulated:", q->device(),
                               " (invalid resource handle: a stream belongs to the device it was created on)"));
  }
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  s.queues[q->id()].push_back(Item{std::move(work), nullptr, nullptr});
}

void drain(Queue* q) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  const auto pending = [&] {
    if (q) return !s.queues[q->id()].empty();
    return std::any_of(s.queues.begin(), s.queues.end(), [](const auto& kv) { return !kv.second.empty(); });
  };
  while (pending()) {
    if (!step(s)) stuck();
  }
}

std::shared_ptr<EventToken> record(Queue* q) {
  auto token = std::make_shared<EventToken>();
  if (!q) {
    token->done = true, token->when_ms = now_ms();
    return token;
  }
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  s.queues[q->id()].push_back(Item{{}, token, nullptr});
  return token;
}

void wait(Queue* q, std::shared_ptr<EventToken> token) {
  if (!token || token->done) return;
  if (!q) {
    drain_until(token);  // the default stream runs at once, so it waits by running the marker
    return;
  }
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  s.queues[q->id()].push_back(Item{{}, nullptr, std::move(token)});
}

bool query(const std::shared_ptr<EventToken>& token) {
  if (!token) return true;
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  return token->done;
}

namespace {
thread_local std::pair<LastError, std::string> t_last_error{LastError::success, {}};
}  // namespace

void set_last_error(LastError code, std::string text) { t_last_error = {code, std::move(text)}; }

std::pair<LastError, std::string> take_last_error() { return std::exchange(t_last_error, {LastError::success, {}}); }

void clear_stale_error() {
  if (t_last_error.first == LastError::success) return;
  auto [code, text] = take_last_error();
  if (code == LastError::not_ready) return;
  throw Error("gpu: an earlier call failed and its error was not read: " + text + " (found before a kernel launch, which did not run)");
}

void check_launch() {
  if (t_last_error.first == LastError::success) return;
  throw Error("gpu: kernel launch failed: " + take_last_error().second);
}

void drain_until(const std::shared_ptr<EventToken>& token) {
  if (!token) return;
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  while (!token->done) {
    if (!step(s)) stuck();
  }
}

size_t pending_work() {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  size_t n = 0;
  for (const auto& [id, q] : s.queues) n += q.size();
  return n;
}

}  // namespace tessera::emu
