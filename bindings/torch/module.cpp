// The Python module optcast_torch: importing it registers backend "optcast" with
// torch.distributed (PyTorch 1.13: Backend.register_backend(name, func), func called as
// func(prefix_store, rank, size, timeout) by init_process_group and new_group).
#include <chrono>

#include <pybind11/chrono.h>
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"

namespace py = pybind11;
using optcast::torch_backend::process_group;

PYBIND11_MODULE(optcast_torch, m) {
  m.doc() = "optcast's collectives as a torch.distributed backend: import optcast_torch, then "
            "dist.init_process_group(\"optcast\", ...)";
  // torch's ProcessGroup and Store types must be known to pybind11 before ours derives.
  auto dist = py::module_::import("torch.distributed");
  py::class_<process_group, c10d::ProcessGroup, c10::intrusive_ptr<process_group>>(m, "ProcessGroupOptcast")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<process_group>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  auto create = py::cpp_function(
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return c10::make_intrusive<process_group>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
  m.attr("create_process_group") = create;
  m.def(
      "shrink",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
        auto* pg = dynamic_cast<process_group*>(group.get());
        if (!pg) throw py::value_error("optcast_torch.shrink: not a process group of backend \"optcast\"");
        c10::intrusive_ptr<process_group> out;
        {
          py::gil_scoped_release nogil;
          out = pg->shrink();
        }
        // Known to torch.distributed as any group is, so that its calls taking a group
        // (get_rank, broadcast's global src, destroy_process_group) work with this one.
        py::dict scope;
        scope["old"] = py::cast(group);
        scope["new"] = py::cast(out);
        scope["members"] = py::cast(out->members());
        py::exec(R"(
import torch.distributed.distributed_c10d as c10d
_ranks = c10d._pg_group_ranks.get(old)
_global = {g: w for w, g in _ranks.items()} if _ranks is not None else {j: j for j in members}
c10d._pg_group_ranks[new] = {_global[j]: i for i, j in enumerate(members)}
c10d._pg_map[new] = c10d._pg_map.get(old, ("optcast", None))
c10d._pg_names[new] = c10d._pg_names.get(old, "optcast") + "-shrunk-" + str(len(c10d._pg_names))
)",
                 scope);
        return out;
      },
      py::arg("group"),
      "After a failure, every surviving rank calls shrink(group) and gets a process group of the survivors "
      "(ranks renumbered in order, the same connections): rebuild DDP on it and go on. Raises RuntimeError "
      "with the reason where it cannot.");
  dist.attr("Backend").attr("register_backend")("optcast", create);
}
