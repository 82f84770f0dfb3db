# ragkv eval sweep; gnuplot musique150-smollm2.gp
set terminal svg size 1500,520 dynamic font 'sans,12' background rgb 'white'
set output 'musique150-smollm2.svg'
set datafile missing 'nan'
set termoption noenhanced
set grid
set offsets graph 0.03, graph 0.03, 0, 0
set key below font 'sans,10'
set multiplot layout 1,3 title '150 queries, baseline full: recovery of the damage reuse does, and agreement with full'
set xlabel 'compute (token-layers of every pass / full prefill)'
set ylabel 'recovery of first-token KL'
set yrange [-0.2:1.05]
plot 'musique150-smollm2.dat' index 0 using 2:4 with linespoints lc 1 dt 1 pt 7 title 'auto', \
     'musique150-smollm2.dat' index 1 using 2:4 with linespoints lc 1 dt 2 pt 5 title 'auto + fallback', \
     'musique150-smollm2.dat' index 2 using 2:4 with linespoints lc 1 dt 3 pt 9 title 'auto + fallback M/C', \
     'musique150-smollm2.dat' index 3 using 2:4 with linespoints lc 2 dt 1 pt 7 title 'blend', \
     'musique150-smollm2.dat' index 4 using 2:4 with linespoints lc 2 dt 2 pt 5 title 'blend + fallback', \
     'musique150-smollm2.dat' index 5 using 2:4 with linespoints lc 2 dt 3 pt 9 title 'blend + fallback M/C', \
     'musique150-smollm2.dat' index 6 using 2:4 with linespoints lc 3 dt 1 pt 7 title 'craft', \
     'musique150-smollm2.dat' index 7 using 2:4 with linespoints lc 3 dt 2 pt 5 title 'craft + fallback', \
     'musique150-smollm2.dat' index 8 using 2:4 with linespoints lc 3 dt 3 pt 9 title 'craft + fallback M/C', \
     'musique150-smollm2.dat' index 9 using 2:4 with linespoints lc 4 dt 1 pt 7 title 'craft/prophet', \
     'musique150-smollm2.dat' index 10 using 2:4 with linespoints lc 5 dt 2 pt 5 title 'craft/prophet@0.15 + fallback', \
     'musique150-smollm2.dat' index 11 using 2:4 with linespoints lc 5 dt 3 pt 9 title 'craft/prophet@0.15 + fallback M/C', \
     'musique150-smollm2.dat' index 12 using 2:4 with linespoints lc 6 dt 1 pt 7 title 'reuse', \
     'musique150-smollm2.dat' index 13 using 2:4 with linespoints lc 6 dt 2 pt 5 title 'reuse + fallback', \
     'musique150-smollm2.dat' index 14 using 2:4 with linespoints lc 6 dt 3 pt 9 title 'reuse + fallback M/C'
set ylabel 'recovery of first-token agreement'
plot 'musique150-smollm2.dat' index 0 using 2:5 with linespoints lc 1 dt 1 pt 7 title 'auto', \
     'musique150-smollm2.dat' index 1 using 2:5 with linespoints lc 1 dt 2 pt 5 title 'auto + fallback', \
     'musique150-smollm2.dat' index 2 using 2:5 with linespoints lc 1 dt 3 pt 9 title 'auto + fallback M/C', \
     'musique150-smollm2.dat' index 3 using 2:5 with linespoints lc 2 dt 1 pt 7 title 'blend', \
     'musique150-smollm2.dat' index 4 using 2:5 with linespoints lc 2 dt 2 pt 5 title 'blend + fallback', \
     'musique150-smollm2.dat' index 5 using 2:5 with linespoints lc 2 dt 3 pt 9 title 'blend + fallback M/C', \
     'musique150-smollm2.dat' index 6 using 2:5 with linespoints lc 3 dt 1 pt 7 title 'craft', \
     'musique150-smollm2.dat' index 7 using 2:5 with linespoints lc 3 dt 2 pt 5 title 'craft + fallback', \
     'musique150-smollm2.dat' index 8 using 2:5 with linespoints lc 3 dt 3 pt 9 title 'craft + fallback M/C', \
     'musique150-smollm2.dat' index 9 using 2:5 with linespoints lc 4 dt 1 pt 7 title 'craft/prophet', \
     'musique150-smollm2.dat' index 10 using 2:5 with linespoints lc 5 dt 2 pt 5 title 'craft/prophet@0.15 + fallback', \
     'musique150-smollm2.dat' index 11 using 2:5 with linespoints lc 5 dt 3 pt 9 title 'craft/prophet@0.15 + fallback M/C', \
     'musique150-smollm2.dat' index 12 using 2:5 with linespoints lc 6 dt 1 pt 7 title 'reuse', \
     'musique150-smollm2.dat' index 13 using 2:5 with linespoints lc 6 dt 2 pt 5 title 'reuse + fallback', \
     'musique150-smollm2.dat' index 14 using 2:5 with linespoints lc 6 dt 3 pt 9 title 'reuse + fallback M/C'
set xlabel 'TTFT / full'
set ylabel 'first-token agreement with full'
set yrange [*:1.02]
plot 'musique150-smollm2.dat' index 0 using 3:6 with linespoints lc 1 dt 1 pt 7 title 'auto', \
     'musique150-smollm2.dat' index 1 using 3:6 with linespoints lc 1 dt 2 pt 5 title 'auto + fallback', \
     'musique150-smollm2.dat' index 2 using 3:6 with linespoints lc 1 dt 3 pt 9 title 'auto + fallback M/C', \
     'musique150-smollm2.dat' index 3 using 3:6 with linespoints lc 2 dt 1 pt 7 title 'blend', \
     'musique150-smollm2.dat' index 4 using 3:6 with linespoints lc 2 dt 2 pt 5 title 'blend + fallback', \
     'musique150-smollm2.dat' index 5 using 3:6 with linespoints lc 2 dt 3 pt 9 title 'blend + fallback M/C', \
     'musique150-smollm2.dat' index 6 using 3:6 with linespoints lc 3 dt 1 pt 7 title 'craft', \
     'musique150-smollm2.dat' index 7 using 3:6 with linespoints lc 3 dt 2 pt 5 title 'craft + fallback', \
     'musique150-smollm2.dat' index 8 using 3:6 with linespoints lc 3 dt 3 pt 9 title 'craft + fallback M/C', \
     'musique150-smollm2.dat' index 9 using 3:6 with linespoints lc 4 dt 1 pt 7 title 'craft/prophet', \
     'musique150-smollm2.dat' index 10 using 3:6 with linespoints lc 5 dt 2 pt 5 title 'craft/prophet@0.15 + fallback', \
     'musique150-smollm2.dat' index 11 using 3:6 with linespoints lc 5 dt 3 pt 9 title 'craft/prophet@0.15 + fallback M/C', \
     'musique150-smollm2.dat' index 12 using 3:6 with linespoints lc 6 dt 1 pt 7 title 'reuse', \
     'musique150-smollm2.dat' index 13 using 3:6 with linespoints lc 6 dt 2 pt 5 title 'reuse + fallback', \
     'musique150-smollm2.dat' index 14 using 3:6 with linespoints lc 6 dt 3 pt 9 title 'reuse + fallback M/C'
unset multiplot
