# ragkv eval sweep; gnuplot final-auto-squad200-gemma3.gp
set terminal svg size 1500,520 dynamic font 'sans,12' background rgb 'white'
set output 'final-auto-squad200-gemma3.svg'
set datafile missing 'nan'
set termoption noenhanced
set grid
set offsets graph 0.03, graph 0.03, 0, 0
set key below font 'sans,10'
set multiplot layout 1,3 title '200 queries, baseline full: recovery of the damage reuse does, and agreement with full'
set xlabel 'compute (token-layers of every pass / full prefill)'
set ylabel 'recovery of first-token KL'
set yrange [-0.2:1.05]
plot 'final-auto-squad200-gemma3.dat' index 0 using 2:4 with linespoints lc 1 dt 1 pt 7 title 'auto', \
     'final-auto-squad200-gemma3.dat' index 1 using 2:4 with linespoints lc 1 dt 2 pt 5 title 'auto + fallback', \
     'final-auto-squad200-gemma3.dat' index 2 using 2:4 with linespoints lc 1 dt 3 pt 9 title 'auto + fallback M/C', \
     'final-auto-squad200-gemma3.dat' index 3 using 2:4 with linespoints lc 2 dt 1 pt 7 title 'reuse', \
     'final-auto-squad200-gemma3.dat' index 4 using 2:4 with linespoints lc 2 dt 2 pt 5 title 'reuse + fallback', \
     'final-auto-squad200-gemma3.dat' index 5 using 2:4 with linespoints lc 2 dt 3 pt 9 title 'reuse + fallback M/C'
set ylabel 'recovery of first-token agreement'
plot 'final-auto-squad200-gemma3.dat' index 0 using 2:5 with linespoints lc 1 dt 1 pt 7 title 'auto', \
     'final-auto-squad200-gemma3.dat' index 1 using 2:5 with linespoints lc 1 dt 2 pt 5 title 'auto + fallback', \
     'final-auto-squad200-gemma3.dat' index 2 using 2:5 with linespoints lc 1 dt 3 pt 9 title 'auto + fallback M/C', \
     'final-auto-squad200-gemma3.dat' index 3 using 2:5 with linespoints lc 2 dt 1 pt 7 title 'reuse', \
     'final-auto-squad200-gemma3.dat' index 4 using 2:5 with linespoints lc 2 dt 2 pt 5 title 'reuse + fallback', \
     'final-auto-squad200-gemma3.dat' index 5 using 2:5 with linespoints lc 2 dt 3 pt 9 title 'reuse + fallback M/C'
set xlabel 'TTFT / full'
set ylabel 'first-token agreement with full'
set yrange [*:1.02]
plot 'final-auto-squad200-gemma3.dat' index 0 using 3:6 with linespoints lc 1 dt 1 pt 7 title 'auto', \
     'final-auto-squad200-gemma3.dat' index 1 using 3:6 with linespoints lc 1 dt 2 pt 5 title 'auto + fallback', \
     'final-auto-squad200-gemma3.dat' index 2 using 3:6 with linespoints lc 1 dt 3 pt 9 title 'auto + fallback M/C', \
     'final-auto-squad200-gemma3.dat' index 3 using 3:6 with linespoints lc 2 dt 1 pt 7 title 'reuse', \
     'final-auto-squad200-gemma3.dat' index 4 using 3:6 with linespoints lc 2 dt 2 pt 5 title 'reuse + fallback', \
     'final-auto-squad200-gemma3.dat' index 5 using 3:6 with linespoints lc 2 dt 3 pt 9 title 'reuse + fallback M/C'
unset multiplot
