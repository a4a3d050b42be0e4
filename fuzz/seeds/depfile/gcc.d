build/out.o: kernels/add.c include/a\ b.h \
  include/we\ ird\ $$x\ \#h.h
include/a\ b.h:
