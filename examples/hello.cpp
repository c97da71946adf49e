// The README's example: broadcast a greeting from rank 0. Run: ./hello --np 4
#include <cstdio>
#include <string>

#include <optcast/optcast.hpp>

int main(int argc, char** argv) try {
  if (argc > 1 && std::string(argv[1]) == "--help") return std::puts("usage: hello --np N   (N ranks on this machine)\n"
                     "   or: hello         (one rank of a job started by mpirun, srun, torchrun-style or\n"
                     "                      OPTCAST_* variables; see docs/RUNNING.md, \"Running on a cluster\")"), 0;
  if (auto status = optcast::launch_local(argc, argv)) return *status;  // --np N
  optcast::communicator comm = optcast::tcp::join();  // this process is one rank

  std::string text(32, '\0');
  if (comm.rank() == 0) text = "hello from rank 0 of " + std::to_string(comm.size());
  text.resize(32);

  auto r = optcast::run(comm, optcast::broadcast(comm, std::span(text.data(), text.size()), 0));
  if (r) r = comm.leave();  // the job's outcome: every rank finished, or who failed and why
  if (!r) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), optcast::describe(r.error(), comm.failure_detail()).c_str());
    return 1;
  }
  std::printf("rank %d got: %s\n", comm.rank(), text.c_str());
} catch (const optcast::setup_error& e) {  // e.g. started without --np or OPTCAST_* variables
  std::fprintf(stderr, "hello: %s\n", e.what());
  return 1;
}
